/* The `serve` scenario (issue 9): lull-kv beside redis-server, both driven
 * by redis-benchmark, a client nobody on this project wrote, in one run.
 *
 * Throughput and latency: lull-kv and `redis-server --save '' --appendonly
 * no --io-threads 1` (persistence off, one I/O thread: both single-threaded
 * event loops) each listen on a free port of 127.0.0.1. Each round runs
 * `redis-benchmark -t ping_mbulk,set,get -n N -c 50 -P D --csv` at D = 1
 * and 16, against lull-kv then redis-server (A B A B ...), and reads the
 * CSV for requests/s, p50 and p99 (ms). Figures: median [min–max] over
 * rounds.
 *
 * Replication: a primary gets K keys (a pipelined loader of our own), then
 * a replica starts (`lull-kv --replica-of`, `redis-server --replicaof`).
 * While it catches up, `redis-benchmark -t ping_mbulk -c 10` measures the
 * primary's latency; catch-up ends when the replica's offset
 * (slave_repl_offset) reaches the primary's (master_repl_offset) with the
 * link up, both read from `INFO replication` every few ms. redis-benchmark
 * only reports on runs it finishes, so the ping load is a chain of short
 * runs (about 100 ms each) started until catch-up ends; their latency
 * distributions are merged (a conservative p99: each run's cumulative
 * counts are taken at the printed bucket edges, never interpolated). The
 * last run may outlast catch-up by up to one run. lull-kv runs as primary
 * with --repl-mode per-record and budget (the same switch as `replicate`).
 * `--only replication` runs these rows alone, `--only throughput` the
 * first table alone.
 *
 * CPUs: with two or more, the servers run on one and redis-benchmark on
 * another; during catch-up the primary and its pings share one and the
 * replica has the other (as in `replicate`): unpinned, three busy
 * processes on two CPUs leave the ping p99 to the scheduler.
 *
 * Every process started here is in a table: they are killed on every exit
 * path, on SIGINT/SIGTERM/SIGHUP (the handler kills them, then re-raises),
 * and by the kernel should lull-lab die (PR_SET_PDEATHSIG). Ports: lull-kv
 * picks its own (--port 0, read from its "listening on" line); redis-server
 * gets one the kernel just handed out, and is restarted on another if it
 * fails to bind. Missing tools skip with one line. */
#include "lab.h"
#include "soak.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull

enum { S_KV, S_REDIS, SERVERS };
static const char *const server_name[SERVERS] = {"lull-kv", "redis-server"};
static const char *const server_key[SERVERS] = {"lull_kv", "redis_server"};

enum { T_PING, T_SET, T_GET, TESTS };
static const char *const test_csv[TESTS] = {"PING_MBULK", "SET", "GET"};
static const char *const test_key[TESTS] = {"ping_mbulk", "set", "get"};

#define DEPTHS 2
static const int depth[DEPTHS] = {1, 16};

enum { R_KV_PER_RECORD, R_KV_BUDGET, R_REDIS, REPL_ROWS };
static const char *const repl_label[REPL_ROWS] = {
    "lull-kv, per-record", "lull-kv, budget", "redis-server"};
static const char *const repl_key[REPL_ROWS] = {
    "replication_lull_kv_per_record", "replication_lull_kv_budget",
    "replication_redis_server"};

/* lull-kv's default quantum (a shared loop's: BRIEF C5); the budget-mode
 * target is this plus 1 ms. */
#define KV_QUANTUM_MS 0.5

typedef struct params {
    int rounds;
    int requests[DEPTHS]; /* -n per test at each depth */
    int clients;
    int keys; /* written before a replica catches up */
    int value_size;
    int repl_rounds;
    int ping_clients;
} params;

/* ------------------------------------------------------------ children */

/* Every process this scenario started and has not reaped yet. */
#define MAX_CHILDREN 8
static volatile pid_t children[MAX_CHILDREN];
static struct sigaction saved_action[3];
static const int caught[3] = {SIGINT, SIGTERM, SIGHUP};

static void kill_all_children(void) {
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0) kill(children[i], SIGKILL);
}

/* redis-server's working directories (empty while it runs with
 * persistence off), removed by the signal handler too. */
static char work_dirs[MAX_CHILDREN][64];

static void on_signal(int sig) {
    kill_all_children();
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (work_dirs[i][0]) rmdir(work_dirs[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void guard_children(bool on) {
    for (int i = 0; i < 3; i++) {
        if (on) {
            struct sigaction sa = {.sa_handler = on_signal};
            sigemptyset(&sa.sa_mask);
            sigaction(caught[i], &sa, &saved_action[i]);
        } else {
            sigaction(caught[i], &saved_action[i], NULL);
        }
    }
}

/* The two CPUs the servers and the clients are pinned to (-1: not
 * pinned, when this process may run on one CPU only). */
static int cpu_server = -1, cpu_client = -1;

static void choose_cpus(void) {
    cpu_set_t set;
    cpu_server = cpu_client = -1;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE && cpu_client < 0; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        if (cpu_server < 0)
            cpu_server = c;
        else
            cpu_client = c;
    }
    if (cpu_client < 0) cpu_server = -1;
}

/* Starts path with args, its stdout and stderr on out_fd (-1: /dev/null),
 * pinned to cpu (-1: not pinned). Returns its pid, or a negative errno. */
static pid_t spawn(char *const *args, int out_fd, int cpu) {
    int slot = -1;
    for (int i = 0; i < MAX_CHILDREN && slot < 0; i++)
        if (children[i] <= 0) slot = i;
    if (slot < 0) return -EMFILE;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* the parent is gone already */
        if (cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        for (int i = 0; i < 3; i++)
            signal(caught[i], SIG_DFL);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) dup2(null, STDIN_FILENO);
        int out = out_fd >= 0 ? out_fd : null;
        if (out >= 0) {
            dup2(out, STDOUT_FILENO);
            dup2(out, STDERR_FILENO);
        }
        execv(args[0], args);
        _exit(127);
    }
    children[slot] = pid;
    return pid;
}

static void forget(pid_t pid) {
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid) children[i] = 0;
}

/* Reaps pid if it has exited; true when it has (or is unknown). */
static bool exited(pid_t pid) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == 0) return false;
    forget(pid);
    return true;
}

static void stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    forget(pid);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* An unlinked temporary file for a child's output: a child writing much
 * never blocks on it, and its first lines are there to quote. Close-on-exec,
 * so that only its own child (through dup2) inherits it. */
static int temp_output(void) {
    char path[] = "/tmp/lull-lab-serve-XXXXXX";
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return -1;
    unlink(path);
    return fd;
}

/* The first line of what a child wrote, for a skip or error message. */
static void first_line(int fd, char *buf, size_t size) {
    ssize_t n = pread(fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

static double seconds(struct timeval tv) {
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* A running process's CPU time so far (user + system, seconds) and its
 * voluntary context switches (each one a sleep: for a server, a wait in
 * epoll_wait with nothing ready). False when /proc cannot say. */
static bool proc_cpu(pid_t pid, double *cpu_s, long *sleeps) {
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return false;
    text[n] = '\0';
    /* Fields after the command name, which may hold spaces: state is the
     * 3rd field, utime the 14th, stime the 15th. */
    const char *p = strrchr(text, ')');
    unsigned long utime, stime;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%lu %lu",
                     &utime, &stime) != 2)
        return false;
    *cpu_s = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "voluntary_ctxt_switches: %ld", sleeps) == 1;
    fclose(f);
    return found;
}

/* Runs args to the end with stdout captured into buf (size-1 bytes at
 * most); gives up and kills it after timeout_ms without output. The
 * child's CPU time goes to *cpu_s when cpu_s is not NULL. */
static int run_capture(char *const *args, char *buf, size_t size,
                       int timeout_ms, int cpu, double *cpu_s) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    pid_t pid = spawn(args, pipefd[1], cpu);
    close(pipefd[1]);
    if (pid < 0) {
        close(pipefd[0]);
        return pid;
    }
    size_t used = 0;
    int rc = 0;
    for (;;) {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int n = poll(&pfd, 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        char scratch[4096];
        bool full = used >= size - 1;
        ssize_t r = read(pipefd[0], full ? scratch : buf + used,
                         full ? sizeof scratch : size - 1 - used);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (!full) used += (size_t)r;
    }
    buf[used] = '\0';
    close(pipefd[0]);
    if (rc < 0) kill(pid, SIGKILL);
    int status;
    struct rusage ru = {0};
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    forget(pid);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        rc = -ECHILD;
    if (cpu_s) *cpu_s = seconds(ru.ru_utime) + seconds(ru.ru_stime);
    return rc;
}

/* ------------------------------------------------------------- finding */

static char kv_path[512], redis_path[512], bench_path[512];
static char redis_version[32], bench_version[32];

static bool on_path(const char *name, char *out, size_t size) {
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t len = strcspn(path, ":");
        if (len > 0) {
            snprintf(out, size, "%.*s/%s", (int)len, path, name);
            if (access(out, X_OK) == 0) return true;
        }
        path += len;
        if (*path == ':') path++;
    }
    return false;
}

/* --kv PATH, else the lull-kv built beside lull-lab (its path is compiled
 * in when the examples are built). */
static const char *kv_option;

static bool kv_available(char *why, size_t size) {
    const char *p = kv_option;
#ifdef LAB_KV_PATH
    if (!p) p = LAB_KV_PATH;
#endif
    if (!p) {
        snprintf(why, size, "not built (examples off; --kv PATH names one)");
        return false;
    }
    snprintf(kv_path, sizeof kv_path, "%s", p);
    if (access(kv_path, X_OK) != 0) {
        snprintf(why, size, "%s not found", kv_path);
        return false;
    }
    return true;
}

/* "Redis server v=7.0.15 sha=..." and "redis-benchmark 7.0.15". */
static bool tool_version(char *path, const char *marker, char *out,
                         size_t size) {
    char *args[] = {path, "--version", NULL};
    char buf[256];
    if (run_capture(args, buf, sizeof buf, 5000, -1, NULL) != 0) return false;
    const char *v = strstr(buf, marker);
    if (!v) return false;
    v += strlen(marker);
    snprintf(out, size, "%.*s", (int)strcspn(v, " \n"), v);
    return true;
}

static bool redis_available(char *why, size_t size) {
    if (!on_path("redis-server", redis_path, sizeof redis_path)) {
        snprintf(why, size, "not on PATH");
        return false;
    }
    if (!tool_version(redis_path, "v=", redis_version, sizeof redis_version)) {
        snprintf(why, size, "`redis-server --version` failed");
        return false;
    }
    return true;
}

static bool bench_available(char *why, size_t size) {
    if (!on_path("redis-benchmark", bench_path, sizeof bench_path)) {
        snprintf(why, size, "not on PATH");
        return false;
    }
    if (!tool_version(bench_path, "redis-benchmark ", bench_version,
                      sizeof bench_version)) {
        snprintf(why, size, "`redis-benchmark --version` failed");
        return false;
    }
    return true;
}

static const char *get_redis_version(void) {
    return redis_version;
}
static const char *get_bench_version(void) {
    return bench_version;
}

/* ---------------------------------------------------------- the client */

/* A blocking connection to 127.0.0.1:port with 5 s timeouts, or -1. */
static int client_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {5, 0};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_exact(int fd, char *p, size_t n) {
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Whether 127.0.0.1:port answers PING with +PONG. */
static bool answers_ping(int port) {
    int fd = client_connect(port);
    if (fd < 0) return false;
    char reply[8];
    bool ok = send_all(fd, "*1\r\n$4\r\nPING\r\n", 14) == 0 &&
              recv_exact(fd, reply, 7) == 0 &&
              memcmp(reply, "+PONG\r\n", 7) == 0;
    close(fd);
    return ok;
}

/* The text of `INFO replication` from fd into buf; 0 or -1. */
static int info_replication(int fd, char *buf, size_t size) {
    static const char req[] = "*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";
    if (send_all(fd, req, sizeof req - 1) < 0) return -1;
    char head[32];
    size_t h = 0;
    while (h < sizeof head - 1) { /* "$<len>\r\n" */
        if (recv_exact(fd, head + h, 1) < 0) return -1;
        if (head[h++] == '\n') break;
    }
    head[h] = '\0';
    if (head[0] != '$') return -1;
    long len = strtol(head + 1, NULL, 10);
    if (len < 0 || (size_t)len + 2 > size) return -1;
    if (recv_exact(fd, buf, (size_t)len + 2) < 0) return -1;
    buf[len] = '\0';
    return 0;
}

/* The integer after "name:" at the start of a line of an INFO text, or
 * -1. */
static long long info_number(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, name, n) == 0 && p[n] == ':')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

static bool info_has(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, line, n) == 0 && (p[n] == '\r' || p[n] == '\n'))
            return true;
    return false;
}

/* Writes keys "key:%08d" with value_size-byte values, pipelined in
 * batches whose replies (+OK) fit the socket buffers whatever the server
 * does with its output. Returns 0 or -1. */
static int load_keys(int port, int keys, int value_size) {
    enum { BATCH = 4096 };
    int fd = client_connect(port);
    if (fd < 0) return -1;
    char value[256];
    if (value_size > (int)sizeof value) value_size = sizeof value;
    memset(value, 'v', (size_t)value_size);
    size_t cap = (size_t)BATCH * (64 + (size_t)value_size);
    char *out = malloc(cap);
    char *in = malloc((size_t)BATCH * 5);
    int rc = out && in ? 0 : -1;
    for (int k = 0; rc == 0 && k < keys; k += BATCH) {
        int n = keys - k < BATCH ? keys - k : BATCH;
        size_t used = 0;
        for (int i = 0; i < n; i++)
            used += (size_t)snprintf(out + used, cap - used,
                                     "*3\r\n$3\r\nSET\r\n$12\r\nkey:%08d\r\n$%"
                                     "d\r\n%.*s\r\n",
                                     k + i, value_size, value_size, value);
        if (send_all(fd, out, used) < 0 ||
            recv_exact(fd, in, (size_t)n * 5) < 0)
            rc = -1;
        for (int i = 0; rc == 0 && i < n; i++)
            if (memcmp(in + (size_t)i * 5, "+OK\r\n", 5) != 0) rc = -1;
    }
    free(out);
    free(in);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------- servers */

typedef struct server {
    pid_t pid;
    int port;
    int out_fd;    /* its stdout and stderr */
    char dir[64];  /* redis-server's working directory, or "" */
    char why[160]; /* why it did not start */
} server;

static void server_stop(server *s) {
    stop(s->pid);
    s->pid = 0;
    if (s->out_fd >= 0) close(s->out_fd);
    s->out_fd = -1;
    if (s->dir[0]) {
        /* Empty but for a file a replica may have left (a temporary RDB). */
        DIR *d = opendir(s->dir);
        for (struct dirent *e; d && (e = readdir(d));)
            if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
        if (d) closedir(d);
        rmdir(s->dir);
        for (int i = 0; i < MAX_CHILDREN; i++)
            if (strcmp(work_dirs[i], s->dir) == 0) work_dirs[i][0] = '\0';
        s->dir[0] = '\0';
    }
}

/* A port the kernel just handed out on 127.0.0.1 (free a moment ago). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Waits up to 10 s for s to answer PING (and, for lull-kv, first to say
 * its port). false with s->why set when it exited or never answered. */
static bool server_ready(server *s, bool read_port) {
    for (int waited = 0; waited < 10000; waited += 5) {
        if (exited(s->pid)) {
            char line[120];
            first_line(s->out_fd, line, sizeof line);
            snprintf(s->why, sizeof s->why, "exited at start: %s", line);
            s->pid = 0;
            return false;
        }
        if (read_port && s->port <= 0) {
            char text[512];
            ssize_t n = pread(s->out_fd, text, sizeof text - 1, 0);
            text[n > 0 ? n : 0] = '\0';
            const char *at = strstr(text, "listening on 127.0.0.1:");
            if (at) s->port = atoi(at + 23);
        }
        if (s->port > 0 && answers_ping(s->port)) return true;
        sleep_ms(5);
    }
    snprintf(s->why, sizeof s->why, "did not answer PING within 10 s");
    return false;
}

/* lull-kv on a port of its choosing, with extra arguments (NULL-ended). */
static bool start_kv(server *s, const char *const *extra, int cpu) {
    memset(s, 0, sizeof *s);
    s->out_fd = temp_output();
    char *args[16] = {kv_path, "--port", "0"};
    int n = 3;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        args[n++] = (char *)extra[i];
    args[n] = NULL;
    s->pid = spawn(args, s->out_fd, cpu);
    if (s->pid < 0) {
        snprintf(s->why, sizeof s->why, "cannot start: %s", strerror(-s->pid));
        s->pid = 0;
        return false;
    }
    if (server_ready(s, true)) return true;
    server_stop(s);
    return false;
}

/* Starts redis-server, persistence off, one I/O thread; replica_of > 0
 * makes it a replica of 127.0.0.1:replica_of. */
static bool spawn_redis(server *s, int replica_of, int cpu) {
    memset(s, 0, sizeof *s);
    s->out_fd = temp_output();
    snprintf(s->dir, sizeof s->dir, "/tmp/lull-lab-redis-XXXXXX");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = '\0';
        snprintf(s->why, sizeof s->why, "mkdtemp: %s", strerror(errno));
        server_stop(s);
        return false;
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (!work_dirs[i][0]) {
            memcpy(work_dirs[i], s->dir, sizeof s->dir);
            break;
        }
    s->port = free_port();
    char port[16], master[16];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(master, sizeof master, "%d", replica_of);
    char *args[32] = {redis_path, "--save", "", "--appendonly", "no",
                      "--io-threads", "1", "--port", port, "--bind",
                      "127.0.0.1", "--dir", s->dir, "--daemonize", "no",
                      /* Sync at once (not after 5 s, waiting for more
                       * replicas), and load it from the socket. */
                      "--repl-diskless-sync-delay", "0", "--repl-diskless-load",
                      "on-empty-db"};
    int n = 19;
    if (replica_of > 0) {
        args[n++] = "--replicaof";
        args[n++] = "127.0.0.1";
        args[n++] = master;
    }
    args[n] = NULL;
    s->pid = spawn(args, s->out_fd, cpu);
    if (s->pid < 0) {
        snprintf(s->why, sizeof s->why, "cannot start: %s", strerror(-s->pid));
        s->pid = 0;
        server_stop(s);
        return false;
    }
    return true;
}

/* spawn_redis, then waits for PING. A port taken meanwhile by someone
 * else makes it exit at once: it is tried on another (three times). */
static bool start_redis(server *s, int replica_of, int cpu) {
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!spawn_redis(s, replica_of, cpu)) return false;
        if (server_ready(s, false)) return true;
        server_stop(s);
    }
    return false;
}

/* ---------------------------------------------------------- benchmarks */

typedef struct figure {
    lab_series rps, p50, p99;
} figure;

/* Where one server's benchmark run spent CPU, per request over its three
 * tests: the server's and redis-benchmark's, and how many requests the
 * server took per sleep. When redis-benchmark's CPU is the limit (one CPU
 * busy), the rate follows its µs per request, and a server that sleeps
 * more often costs the client more: each sleep is a wake-up the client's
 * next write pays for, and a smaller batch of replies for it to read. */
typedef struct cpu_figure {
    lab_series server_us, client_us, per_sleep;
    lab_series client_busy; /* redis-benchmark's CPU ÷ its run's time */
} cpu_figure;

/* Reads redis-benchmark's --csv: a header naming the columns, then one
 * line per test. Returns how many of the tests were found. */
static int parse_csv(const char *text, double rps[TESTS], double p50[TESTS],
                     double p99[TESTS]) {
    int col_rps = -1, col_p50 = -1, col_p99 = -1, found = 0;
    const char *line = text;
    while (*line) {
        size_t len = strcspn(line, "\n");
        char copy[512];
        snprintf(copy, sizeof copy, "%.*s", (int)len, line);
        line += len + (line[len] == '\n');
        char *cells[16];
        int nc = 0;
        for (char *save = NULL, *c = strtok_r(copy, ",\r", &save); c && nc < 16;
             c = strtok_r(NULL, ",\r", &save)) {
            if (*c == '"') c++;
            c[strcspn(c, "\"")] = '\0';
            cells[nc++] = c;
        }
        if (nc == 0) continue;
        if (strcmp(cells[0], "test") == 0) {
            for (int i = 1; i < nc; i++) {
                if (strcmp(cells[i], "rps") == 0) col_rps = i;
                if (strcmp(cells[i], "p50_latency_ms") == 0) col_p50 = i;
                if (strcmp(cells[i], "p99_latency_ms") == 0) col_p99 = i;
            }
            continue;
        }
        if (col_rps < 0 || col_p50 < 0 || col_p99 < 0 || col_rps >= nc ||
            col_p50 >= nc || col_p99 >= nc)
            continue;
        for (int t = 0; t < TESTS; t++) {
            if (strcmp(cells[0], test_csv[t]) != 0) continue;
            rps[t] = strtod(cells[col_rps], NULL);
            p50[t] = strtod(cells[col_p50], NULL);
            p99[t] = strtod(cells[col_p99], NULL);
            found++;
        }
    }
    return found;
}

static int benchmark(const server *srv, int requests, int clients, int pipeline,
                     figure out[TESTS], cpu_figure *cpu) {
    int port = srv->port;
    char p[16], n[16], c[16], P[16];
    snprintf(p, sizeof p, "%d", port);
    snprintf(n, sizeof n, "%d", requests);
    snprintf(c, sizeof c, "%d", clients);
    snprintf(P, sizeof P, "%d", pipeline);
    char *args[] = {
        bench_path, "-h", "127.0.0.1", "-p", p,    "-t", "ping_mbulk,set,get",
        "-n",       n,    "-c",        c,    "-P", P,    "--csv",
        NULL};
    static char buf[8192];
    double server_s[2], client_s;
    long sleeps[2];
    bool known = proc_cpu(srv->pid, &server_s[0], &sleeps[0]);
    uint64_t t0 = lab_now_ns();
    int rc = run_capture(args, buf, sizeof buf, 60000, cpu_client, &client_s);
    if (rc < 0) return rc;
    double wall_s = (double)(lab_now_ns() - t0) / 1e9;
    known = known && proc_cpu(srv->pid, &server_s[1], &sleeps[1]);
    double rps[TESTS], p50[TESTS], p99[TESTS];
    if (parse_csv(buf, rps, p50, p99) != TESTS) return -EPROTO;
    for (int t = 0; t < TESTS; t++) {
        lab_series_add(&out[t].rps, rps[t]);
        lab_series_add(&out[t].p50, p50[t]);
        lab_series_add(&out[t].p99, p99[t]);
    }
    double total = (double)requests * TESTS;
    lab_series_add(&cpu->client_us, client_s * 1e6 / total);
    lab_series_add(&cpu->client_busy, client_s / wall_s);
    if (known) {
        lab_series_add(&cpu->server_us,
                       (server_s[1] - server_s[0]) * 1e6 / total);
        long slept = sleeps[1] - sleeps[0];
        lab_series_add(&cpu->per_sleep,
                       total / (double)(slept > 0 ? slept : 1));
    }
    return 0;
}

/* ------------------------------------------------------ the ping chain */

/* The latency distribution of a chain of ping runs: each run's printed
 * (edge ms, cumulative count) points. */
#define MAX_POINTS 4096
#define MAX_RUNS   512
typedef struct chain {
    double edge[MAX_POINTS];
    uint64_t cum[MAX_POINTS];
    int run_of[MAX_POINTS];
    int points;
    int runs;
    uint64_t total;
    double rps_sum;
} chain;

/* Takes the "x% <= V milliseconds (cumulative count C)" lines of one run's
 * plain output. */
static void chain_add(chain *ch, const char *text) {
    uint64_t run_total = 0;
    for (const char *l = text; l && *l;
         l = strchr(l, '\n'), l = l ? l + 1 : l) {
        double pct, v;
        unsigned long long c;
        if (sscanf(l, "%lf%% <= %lf milliseconds (cumulative count %llu)", &pct,
                   &v, &c) != 3)
            continue;
        if (ch->points == MAX_POINTS) break;
        ch->edge[ch->points] = v;
        ch->cum[ch->points] = c;
        ch->run_of[ch->points] = ch->runs;
        ch->points++;
        if (c > run_total) run_total = c;
    }
    const char *rps = strstr(text, "throughput summary:");
    if (rps) ch->rps_sum += strtod(rps + 19, NULL);
    ch->total += run_total;
    ch->runs++;
}

/* The smallest edge at which the merged count reaches p of the total: for
 * each run, the count at an edge is its count at its largest printed edge
 * not above it (a lower bound), so the figure errs high, never low. */
static double chain_percentile(const chain *ch, double p) {
    static uint64_t at[MAX_RUNS];
    static double best[MAX_RUNS];
    if (ch->total == 0) return 0;
    double answer = 0;
    bool have = false;
    for (int i = 0; i < ch->points; i++) {
        double t = ch->edge[i];
        if (have && t >= answer) continue;
        memset(at, 0, sizeof at);
        for (int r = 0; r < ch->runs; r++)
            best[r] = -1;
        for (int k = 0; k < ch->points; k++) {
            int r = ch->run_of[k];
            if (ch->edge[k] <= t && ch->edge[k] >= best[r] &&
                ch->cum[k] >= at[r]) {
                best[r] = ch->edge[k];
                at[r] = ch->cum[k];
            }
        }
        uint64_t sum = 0;
        for (int r = 0; r < ch->runs; r++)
            sum += at[r];
        if ((double)sum >= p * (double)ch->total) {
            answer = t;
            have = true;
        }
    }
    return answer;
}

/* Starts one ping run against port; its output goes to a pipe (*rd). */
static pid_t ping_start(int port, int requests, int clients, int *rd) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    char p[16], n[16], c[16];
    snprintf(p, sizeof p, "%d", port);
    snprintf(n, sizeof n, "%d", requests);
    snprintf(c, sizeof c, "%d", clients);
    char *args[] = {bench_path,   "-h", "127.0.0.1", "-p", p, "-t",
                    "ping_mbulk", "-n", n,           "-c", c, NULL};
    /* On the primary's CPU, as replicate's pinger: the replica has the
     * other one to itself. */
    pid_t pid = spawn(args, pipefd[1], cpu_server);
    close(pipefd[1]);
    if (pid < 0)
        close(pipefd[0]);
    else
        *rd = pipefd[0];
    return pid;
}

/* ----------------------------------------------------- replication row */

typedef struct repl_figures {
    lab_series catchup_s, ping_p99, ping_p99_idle, ping_rps;
    uint64_t pings;
    bool skipped;
    char why[240];
} repl_figures;

/* The primary's offset and whether the replica has reached it: 1 caught
 * up, 0 not yet, -1 the query failed. The replica's connection is opened
 * on demand (it may not be listening yet). */
static int caught_up(int primary_fd, int replica_port, int *replica_fd) {
    static char text[8192];
    if (info_replication(primary_fd, text, sizeof text) < 0) return -1;
    long long primary = info_number(text, "master_repl_offset");
    if (*replica_fd < 0) *replica_fd = client_connect(replica_port);
    if (*replica_fd < 0) return 0;
    if (info_replication(*replica_fd, text, sizeof text) < 0) {
        close(*replica_fd);
        *replica_fd = -1;
        return 0;
    }
    long long replica = info_number(text, "slave_repl_offset");
    /* With no writes during the sync, redis-server's offset may stay 0 until
     * its next replica ping (10 s): 0 is a valid offset to reach. */
    return primary >= 0 && replica >= primary &&
           info_has(text, "master_link_status:up");
}

/* A run of the ping chain lasts about this long at the idle rate. */
#define PING_RUN_MS 100

/* One catch-up: a primary of row `row` with p->keys keys, an idle ping
 * run, then a replica and the ping chain until it has caught up. */
static int replicate_once(const params *p, int row, repl_figures *f,
                          int *ping_requests) {
    server primary, replica;
    memset(&replica, 0, sizeof replica);
    replica.out_fd = -1;
    bool kv = row != R_REDIS;
    const char *mode[] = {"--repl-mode",
                          row == R_KV_BUDGET ? "budget" : "per-record", NULL};
    bool ok = kv ? start_kv(&primary, mode, cpu_server)
                 : start_redis(&primary, 0, cpu_server);
    if (!ok) {
        snprintf(f->why, sizeof f->why, "%s primary: %s",
                 kv ? "lull-kv" : "redis-server", primary.why);
        if (kv) f->skipped = true;
        return kv ? 0 : -EIO;
    }
    int rc = 0;
    chain *ch = calloc(1, sizeof *ch);
    int primary_fd = -1, replica_fd = -1, rd = -1;
    pid_t pinger = 0;
    if (!ch) rc = -ENOMEM;
    if (rc == 0 && load_keys(primary.port, p->keys, p->value_size) < 0) {
        snprintf(f->why, sizeof f->why, "loading %d keys failed", p->keys);
        rc = -EIO;
    }

    /* The primary's ping latency with no replica: the reference. */
    if (rc == 0) {
        pinger = ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
        static char out[65536];
        if (pinger < 0) rc = pinger;
        size_t used = 0;
        for (ssize_t r; rc == 0 && (r = read(rd, out + used,
                                             sizeof out - 1 - used)) != 0;) {
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) break;
            used += (size_t)r;
            if (used == sizeof out - 1) break;
        }
        out[used] = '\0';
        if (rd >= 0) close(rd);
        rd = -1;
        if (pinger > 0) stop(pinger);
        pinger = 0;
        chain idle_chain;
        memset(&idle_chain, 0, sizeof idle_chain);
        chain_add(&idle_chain, out);
        if (idle_chain.total == 0) {
            snprintf(f->why, sizeof f->why,
                     "the idle ping run reported nothing");
            rc = -EPROTO;
        } else {
            lab_series_add(&f->ping_p99_idle,
                           chain_percentile(&idle_chain, 0.99));
            /* Runs of about PING_RUN_MS at this rate from now on. */
            double rate = idle_chain.rps_sum;
            int want = (int)(rate * PING_RUN_MS / 1000);
            *ping_requests = want < 1000 ? 1000 : want;
        }
    }
    if (rc == 0 && (primary_fd = client_connect(primary.port)) < 0) rc = -EIO;

    /* The ping chain's first run, then the replica: the pings are there
     * before its first byte is asked for. */
    if (rc == 0) {
        pinger = ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
        if (pinger < 0) rc = pinger;
    }
    uint64_t t0 = lab_now_ns(), t_end = 0;
    if (rc == 0) {
        char master[32];
        snprintf(master, sizeof master, "127.0.0.1:%d", primary.port);
        if (kv) {
            memset(&replica, 0, sizeof replica);
            replica.out_fd = temp_output();
            char *args[] = {kv_path,        "--port", "0",
                            "--replica-of", master,   NULL};
            replica.pid = spawn(args, replica.out_fd, cpu_client);
        } else {
            /* Not waited for: its sync may start at once, and the pings
             * must be running by then. */
            if (!spawn_redis(&replica, primary.port, cpu_client)) {
                snprintf(f->why, sizeof f->why, "redis-server replica: %s",
                         replica.why);
                rc = -EIO;
            }
        }
        if (rc == 0 && replica.pid <= 0) rc = -EIO;
    }
    static char out[65536];
    size_t used = 0;
    bool done = false;
    while (rc == 0) {
        if (pinger <= 0 && !done) {
            pinger =
                ping_start(primary.port, *ping_requests, p->ping_clients, &rd);
            used = 0;
            if (pinger < 0) {
                rc = pinger;
                break;
            }
        }
        if (done && pinger <= 0) break;
        /* Poll the offsets every 5 ms while the run goes on. */
        struct pollfd pfd = {.fd = rd, .events = POLLIN};
        int n = poll(&pfd, 1, 5);
        if (n > 0) {
            ssize_t r = read(rd, out + used, sizeof out - 1 - used);
            if (r > 0) used += (size_t)r;
            if (r == 0 || used == sizeof out - 1) {
                out[used] = '\0';
                close(rd);
                rd = -1;
                stop(pinger);
                pinger = 0;
                chain_add(ch, out);
                if (ch->runs == MAX_RUNS) done = true;
            }
        }
        if (done) continue;
        if (exited(replica.pid)) {
            char line[160];
            first_line(replica.out_fd, line, sizeof line);
            replica.pid = 0;
            snprintf(f->why, sizeof f->why, "%s replica exited: %s",
                     kv ? "lull-kv" : "redis-server", line);
            f->skipped = kv && replica.port <= 0; /* --replica-of refused */
            rc = f->skipped ? 0 : -EIO;
            break;
        }
        if (kv && replica.port <= 0) {
            char text[512];
            ssize_t got = pread(replica.out_fd, text, sizeof text - 1, 0);
            text[got > 0 ? got : 0] = '\0';
            const char *at = strstr(text, "listening on 127.0.0.1:");
            if (at) replica.port = atoi(at + 23);
            if (replica.port <= 0) continue;
        }
        int c = caught_up(primary_fd, replica.port, &replica_fd);
        if (c < 0) {
            snprintf(f->why, sizeof f->why, "INFO replication failed");
            rc = -EIO;
        } else if (c == 1) {
            t_end = lab_now_ns();
            done = true;
        } else if (lab_now_ns() - t0 > 600000 * MS) {
            snprintf(f->why, sizeof f->why, "no catch-up within 600 s");
            rc = -ETIMEDOUT;
        }
    }
    if (rd >= 0) close(rd);
    if (pinger > 0) stop(pinger);
    if (primary_fd >= 0) close(primary_fd);
    if (replica_fd >= 0) close(replica_fd);
    if (rc == 0 && !f->skipped) {
        lab_series_add(&f->catchup_s, (double)(t_end - t0) / 1e9);
        lab_series_add(&f->ping_p99, chain_percentile(ch, 0.99));
        lab_series_add(&f->ping_rps, ch->runs ? ch->rps_sum / ch->runs : 0);
        f->pings += ch->total;
    }
    free(ch);
    server_stop(&replica);
    server_stop(&primary);
    return rc;
}

/* -------------------------------------------------------------- output */

static void cell(lab_table *t, int row, int col, const lab_series *s) {
    char buf[LAB_CELL];
    lab_format_series(buf, sizeof buf, s);
    lab_table_set(t, row, col, "%s", buf);
}

static void print_main(figure f[SERVERS][DEPTHS][TESTS]) {
    const char *header[] = {
        "test, depth", "lull-kv req/s",        "redis-server req/s",
        "ratio",       "lull-kv p50 / p99 ms", "redis-server p50 / p99 ms"};
    lab_table t;
    lab_table_init(&t, 6, header);
    for (int d = 0; d < DEPTHS; d++)
        for (int k = 0; k < TESTS; k++) {
            int row = lab_table_row(&t);
            lab_table_set(&t, row, 0, "%s -P %d", test_key[k], depth[d]);
            cell(&t, row, 1, &f[S_KV][d][k].rps);
            cell(&t, row, 2, &f[S_REDIS][d][k].rps);
            lab_table_set(&t, row, 3, "%.2f",
                          lab_series_median(&f[S_KV][d][k].rps) /
                              lab_series_median(&f[S_REDIS][d][k].rps));
            for (int s = 0; s < SERVERS; s++) {
                char a[LAB_CELL], b[LAB_CELL];
                lab_format_value(a, sizeof a,
                                 lab_series_median(&f[s][d][k].p50));
                lab_format_value(b, sizeof b,
                                 lab_series_median(&f[s][d][k].p99));
                lab_table_set(&t, row, 4 + s, "%s / %s", a, b);
            }
        }
    lab_table_print(&t, stdout);
}

static void print_targets(figure f[SERVERS][DEPTHS][TESTS]) {
    for (int d = 0; d < DEPTHS; d++) {
        int rps_ok = 0, p99_ok = 0;
        for (int k = 0; k < TESTS; k++) {
            if (lab_series_median(&f[S_KV][d][k].rps) >=
                lab_series_median(&f[S_REDIS][d][k].rps))
                rps_ok++;
            if (lab_series_median(&f[S_KV][d][k].p99) <=
                lab_series_median(&f[S_REDIS][d][k].p99))
                p99_ok++;
        }
        printf("  -P %d: lull-kv req/s ≥ redis-server's in %d of %d tests, "
               "p99 no higher in %d of %d; target: all\n",
               depth[d], rps_ok, TESTS, p99_ok, TESTS);
    }
}

/* The CPU table: why a rate is what it is (cpu_figure). */
static void print_cpu(cpu_figure cpu[SERVERS][DEPTHS]) {
    const char *header[] = {"depth",
                            "lull-kv CPU µs/req",
                            "redis-server CPU µs/req",
                            "redis-benchmark µs/req, vs lull-kv",
                            "vs redis-server",
                            "req per sleep, lull-kv",
                            "redis-server"};
    lab_table t;
    lab_table_init(&t, 7, header);
    for (int d = 0; d < DEPTHS; d++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "-P %d", depth[d]);
        for (int s = 0; s < SERVERS; s++) {
            cell(&t, row, 1 + s, &cpu[s][d].server_us);
            cell(&t, row, 3 + s, &cpu[s][d].client_us);
            cell(&t, row, 5 + s, &cpu[s][d].per_sleep);
        }
    }
    printf("\nCPU per request over the three tests: each server's own "
           "(/proc), redis-benchmark's (its rusage); requests per server "
           "sleep (its voluntary context switches)\n");
    lab_table_print(&t, stdout);
    for (int d = 0; d < DEPTHS; d++) {
        if (cpu[S_KV][d].server_us.n == 0 || cpu[S_REDIS][d].server_us.n == 0) {
            printf("  -P %d: a server's CPU time was not readable from /proc\n",
                   depth[d]);
            continue;
        }
        double busy_kv = lab_series_median(&cpu[S_KV][d].client_busy),
               busy_redis = lab_series_median(&cpu[S_REDIS][d].client_busy);
        printf("  -P %d: lull-kv's CPU per request is %.2f× redis-server's; "
               "redis-benchmark kept %.2f and %.2f of a CPU busy%s\n",
               depth[d],
               lab_series_median(&cpu[S_KV][d].server_us) /
                   lab_series_median(&cpu[S_REDIS][d].server_us),
               busy_kv, busy_redis,
               busy_kv > 0.95 && busy_redis > 0.95
                   ? ": the client's CPU is the limit of both rates"
                   : "");
    }
}

static void print_repl(const params *p, repl_figures r[REPL_ROWS]) {
    const char *header[] = {"primary",     "catch-up s",
                            "ping p99 ms", "ping p99 ms, no replica",
                            "ping req/s",  "pings"};
    lab_table t;
    lab_table_init(&t, 6, header);
    for (int i = 0; i < REPL_ROWS; i++) {
        if (r[i].skipped) continue;
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", repl_label[i]);
        cell(&t, row, 1, &r[i].catchup_s);
        cell(&t, row, 2, &r[i].ping_p99);
        cell(&t, row, 3, &r[i].ping_p99_idle);
        cell(&t, row, 4, &r[i].ping_rps);
        lab_table_set(&t, row, 5, "%llu", (unsigned long long)r[i].pings);
    }
    if (t.rows > 1) lab_table_print(&t, stdout);
    if (r[R_KV_BUDGET].skipped)
        printf("  lull-kv rows (per-record, budget): %s, skipped\n",
               r[R_KV_BUDGET].why);
    if (!r[R_KV_BUDGET].skipped)
        printf("  budget mode, primary ping p99 during catch-up of %d keys: "
               "%.2f ms; target ≤ quantum + 1 ms = %.1f ms\n",
               p->keys, lab_series_median(&r[R_KV_BUDGET].ping_p99),
               KV_QUANTUM_MS + 1);
}

static void json_main(lab_json *j, figure f[SERVERS][DEPTHS][TESTS],
                      cpu_figure cpu[SERVERS][DEPTHS], const params *p) {
    char key[64];
    for (int s = 0; s < SERVERS; s++)
        for (int d = 0; d < DEPTHS; d++) {
            snprintf(key, sizeof key, "%s_cpu_p%d", server_key[s], depth[d]);
            lab_json_key(j, key);
            lab_json_begin_object(j);
            lab_json_key(j, "server");
            lab_json_string(j, server_name[s]);
            lab_json_field(j, "pipeline", depth[d]);
            lab_json_series(j, "server_cpu_us_per_req", &cpu[s][d].server_us);
            lab_json_series(j, "client_cpu_us_per_req", &cpu[s][d].client_us);
            lab_json_series(j, "client_busy", &cpu[s][d].client_busy);
            lab_json_series(j, "req_per_server_sleep", &cpu[s][d].per_sleep);
            lab_json_end_object(j);
        }
    for (int s = 0; s < SERVERS; s++)
        for (int d = 0; d < DEPTHS; d++)
            for (int k = 0; k < TESTS; k++) {
                snprintf(key, sizeof key, "%s_%s_p%d", server_key[s],
                         test_key[k], depth[d]);
                lab_json_key(j, key);
                lab_json_begin_object(j);
                lab_json_key(j, "server");
                lab_json_string(j, server_name[s]);
                lab_json_key(j, "test");
                lab_json_string(j, test_key[k]);
                lab_json_field(j, "pipeline", depth[d]);
                lab_json_field(j, "requests", p->requests[d]);
                lab_json_field(j, "clients", p->clients);
                lab_json_series(j, "rps", &f[s][d][k].rps);
                lab_json_series(j, "p50_ms", &f[s][d][k].p50);
                lab_json_series(j, "p99_ms", &f[s][d][k].p99);
                lab_json_end_object(j);
            }
}

static void json_repl(lab_json *j, repl_figures r[REPL_ROWS], const params *p) {
    for (int i = 0; i < REPL_ROWS; i++) {
        lab_json_key(j, repl_key[i]);
        lab_json_begin_object(j);
        lab_json_key(j, "server");
        lab_json_string(j, i == R_REDIS ? "redis-server" : "lull-kv");
        if (i != R_REDIS) {
            lab_json_key(j, "repl_mode");
            lab_json_string(j, i == R_KV_BUDGET ? "budget" : "per-record");
        }
        lab_json_field(j, "keys", p->keys);
        lab_json_field(j, "ping_clients", p->ping_clients);
        if (r[i].skipped) {
            lab_json_key(j, "skipped");
            lab_json_string(j, r[i].why);
        } else {
            lab_json_series(j, "catchup_s", &r[i].catchup_s);
            lab_json_series(j, "ping_p99_ms", &r[i].ping_p99);
            lab_json_series(j, "ping_p99_idle_ms", &r[i].ping_p99_idle);
            lab_json_series(j, "ping_rps", &r[i].ping_rps);
            lab_json_field(j, "pings", (double)r[i].pings);
        }
        lab_json_end_object(j);
    }
}

static void plot_figures(lab_plot *plot, figure f[SERVERS][DEPTHS][TESTS],
                         repl_figures r[REPL_ROWS]) {
    if (!plot) return;
    char title[96], label[64];
    for (int d = 0; d < DEPTHS; d++) {
        snprintf(title, sizeof title,
                 "serve: redis-benchmark requests/s, 50 clients, -P %d",
                 depth[d]);
        lab_plot_panel(plot, title, "req/s");
        for (int k = 0; k < TESTS; k++)
            for (int s = 0; s < SERVERS; s++) {
                snprintf(label, sizeof label, "%s %s", server_name[s],
                         test_key[k]);
                lab_plot_bar(plot, label, &f[s][d][k].rps, s == S_KV);
            }
    }
    bool any = false;
    for (int i = 0; i < REPL_ROWS; i++)
        any |= !r[i].skipped && r[i].ping_p99.n > 0;
    if (!any) return;
    lab_plot_panel(plot, "serve: primary ping p99 while a replica catches up",
                   "ms");
    for (int i = 0; i < REPL_ROWS; i++)
        if (!r[i].skipped && r[i].ping_p99.n > 0)
            lab_plot_bar(plot, repl_label[i], &r[i].ping_p99, i == R_KV_BUDGET);
}

/* ------------------------------------------------------------ scenario */

static void set_params(const lab_options *opts, params *p) {
    memset(p, 0, sizeof *p);
    p->rounds = lab_rounds(opts, 5, 2);
    p->requests[0] = opts->quick ? 20000 : 200000;
    p->requests[1] = opts->quick ? 100000 : 1000000;
    p->clients = 50;
    p->keys = opts->quick ? 100000 : 1000000;
    p->value_size = 32;
    p->repl_rounds = lab_rounds(opts, 3, 1);
    p->ping_clients = 10;
}

static int serve_body(const lab_options *opts, lab_json *json,
                      const params *p) {
    printf("implementations:");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
    char skipped[3][240];
    int nskipped = 0;
    bool have_kv = lab_peer_probe(json, "lull-kv", true, kv_available, NULL,
                                  NULL, skipped[nskipped], sizeof skipped[0]);
    if (!have_kv) nskipped++;
    bool have_redis = lab_peer_probe(json, "redis-server", true,
                                     redis_available, get_redis_version, NULL,
                                     skipped[nskipped], sizeof skipped[0]);
    if (!have_redis) nskipped++;
    bool have_bench = lab_peer_probe(json, "redis-benchmark", true,
                                     bench_available, get_bench_version, NULL,
                                     skipped[nskipped], sizeof skipped[0]);
    if (!have_bench) nskipped++;
    printf("\n");
    if (json) lab_json_end_array(json);
    if (!have_kv || !have_redis || !have_bench) {
        printf("serve skipped (it needs all three):");
        for (int i = 0; i < nskipped; i++)
            printf(" %s%s", skipped[i], i + 1 < nskipped ? ";" : "\n");
        return 0;
    }
    if (json) {
        lab_json_key(json, "params");
        lab_json_begin_object(json);
        lab_json_field(json, "rounds", p->rounds);
        lab_json_field(json, "requests_p1", p->requests[0]);
        lab_json_field(json, "requests_p16", p->requests[1]);
        lab_json_field(json, "clients", p->clients);
        lab_json_field(json, "keys", p->keys);
        lab_json_field(json, "value_bytes", p->value_size);
        lab_json_field(json, "repl_rounds", p->repl_rounds);
        lab_json_end_object(json);
    }
    printf("lull-kv (%s) and redis-server --save '' --appendonly no "
           "--io-threads 1, each on a free port of 127.0.0.1; "
           "redis-benchmark -t ping_mbulk,set,get -c %d -P 1 (-n %d) and "
           "-P 16 (-n %d) --csv, servers in turn (A B A B); %d rounds, "
           "median [min–max]\n",
           kv_path, p->clients, p->requests[0], p->requests[1], p->rounds);
    if (cpu_server >= 0)
        printf("servers pinned to CPU %d, redis-benchmark to CPU %d; in the "
               "replication rows the primary and its pings share CPU %d, the "
               "replica has CPU %d\n",
               cpu_server, cpu_client, cpu_server, cpu_client);
    else
        printf("one CPU: nothing pinned\n");

    static figure f[SERVERS][DEPTHS][TESTS];
    static cpu_figure cpu[SERVERS][DEPTHS];
    static repl_figures r[REPL_ROWS];
    memset(f, 0, sizeof f);
    memset(cpu, 0, sizeof cpu);
    memset(r, 0, sizeof r);
    server srv[SERVERS];
    int rc = 0;
    uint64_t started = lab_now_ns();
    if (opts->only && strcmp(opts->only, "replication") == 0) goto replication;
    if (!start_kv(&srv[S_KV], NULL, cpu_server)) {
        printf("lull-kv: %s\n", srv[S_KV].why);
        return -EIO;
    }
    if (!start_redis(&srv[S_REDIS], 0, cpu_server)) {
        printf("redis-server: %s\n", srv[S_REDIS].why);
        server_stop(&srv[S_KV]);
        return -EIO;
    }
    for (int round = 0; round < p->rounds && rc == 0; round++)
        for (int d = 0; d < DEPTHS && rc == 0; d++)
            for (int s = 0; s < SERVERS && rc == 0; s++) {
                rc = benchmark(&srv[s], p->requests[d], p->clients, depth[d],
                               f[s][d], &cpu[s][d]);
                if (rc < 0)
                    printf("redis-benchmark against %s failed: %s\n",
                           server_name[s], strerror(-rc));
            }
    server_stop(&srv[S_KV]);
    server_stop(&srv[S_REDIS]);
    if (rc < 0) return rc;
    print_main(f);
    print_targets(f);
    print_cpu(cpu);
    if (json) json_main(json, f, cpu, p);

    if (opts->only && strcmp(opts->only, "replication") != 0) {
        printf("  (%.1f s)\n", (double)(lab_now_ns() - started) / 1e9);
        plot_figures(opts->plot, f, r);
        return 0;
    }
replication:
    printf("\nreplication: the primary holds %d keys (%d-byte values); a "
           "replica starts and catches up from offset 0 while "
           "redis-benchmark -t ping_mbulk -c %d runs against the primary "
           "(back-to-back runs of ~%d ms, distributions merged); catch-up = "
           "from the replica's start until its offset equals the primary's; "
           "%d round%s\n",
           p->keys, p->value_size, p->ping_clients, PING_RUN_MS, p->repl_rounds,
           p->repl_rounds == 1 ? "" : "s");
    int ping_requests = 10000;
    for (int round = 0; round < p->repl_rounds && rc == 0; round++)
        for (int i = 0; i < REPL_ROWS && rc == 0; i++) {
            int row = round % 2 == 0 ? i : REPL_ROWS - 1 - i;
            if (r[row].skipped) continue;
            rc = replicate_once(p, row, &r[row], &ping_requests);
            if (rc < 0)
                printf("replication, %s: %s\n", repl_label[row], r[row].why);
            if (r[row].skipped) { /* no replication in this lull-kv */
                int other = row == R_KV_BUDGET ? R_KV_PER_RECORD : R_KV_BUDGET;
                r[other] = r[row];
            }
        }
    if (rc < 0) return rc;
    print_repl(p, r);
    if (json) json_repl(json, r, p);
    printf("  (%.1f s)\n", (double)(lab_now_ns() - started) / 1e9);
    plot_figures(opts->plot, f, r);
    return 0;
}

static int run_serve(const lab_options *opts, lab_json *json) {
    params p;
    set_params(opts, &p);
    kv_option = opts->kv_path;
    choose_cpus();
    guard_children(true);
    int rc = serve_body(opts, json, &p);
    kill_all_children(); /* none should be left; never leave one behind */
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0) stop(children[i]);
    guard_children(false);
    return rc;
}

/* ---------------------------------------------------------------- soak */

/* `lull-lab soak`'s serve entry (lab/soak.h): one lull-kv kept across the
 * runs, started by the first and stopped by lab_serve_soak_end, so its own
 * fds and RSS are watched across the runs like the soak's. Each run
 * writes, reads back, counts and deletes its own keys, "soak:<run>:<i>",
 * and leaves the keyspace empty, which the next run checks first.
 *
 * lull-kv's write log keeps every write for the life of the process
 * (docs/KV.md): a long soak would hold GBs. So once the runs have sent
 * SOAK_LOG_LIMIT bytes of requests to one lull-kv, its fds are checked as
 * at the end and a fresh one takes over (a new warm-up). */
#define SOAK_LOG_LIMIT (256ull << 20)

static struct {
    server srv;
    bool started;
    uint64_t runs;      /* runs in all */
    uint64_t life_runs; /* runs on this lull-kv */
    uint64_t sent;      /* bytes of requests sent to this lull-kv */
    int lives;          /* lull-kv processes started */
    long rss_kb[2];     /* after the first run (warm-up), at the end */
    int fds[2];         /* the same */
    long long log_b[2]; /* the write log's length (master_repl_offset) */
} kvs;

/* A buffered reader of one connection's replies. */
typedef struct reply_reader {
    int fd;
    size_t pos, len;
    char buf[65536];
} reply_reader;

static int rr_byte(reply_reader *r, char *c) {
    if (r->pos == r->len) {
        ssize_t n;
        do
            n = recv(r->fd, r->buf, sizeof r->buf, 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0) return -1;
        r->pos = 0;
        r->len = (size_t)n;
    }
    *c = r->buf[r->pos++];
    return 0;
}

/* A line without its CRLF into out (truncated to size-1); 0 or -1. */
static int rr_line(reply_reader *r, char *out, size_t size) {
    size_t n = 0;
    for (char c;;) {
        if (rr_byte(r, &c) < 0) return -1;
        if (c == '\n') break;
        if (n + 1 < size) out[n++] = c;
    }
    if (n > 0 && out[n - 1] == '\r') n--;
    out[n] = '\0';
    return 0;
}

static int rr_bytes(reply_reader *r, char *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (rr_byte(r, &out[i]) < 0) return -1;
    return 0;
}

#define SOAK_CONNS     4
#define SOAK_DEPTH     64
#define SOAK_VALUE_MAX 2000
#define SOAK_HEADER    24 /* "%08x%08x%08x": run, key, checksum */

static uint32_t fnv1a(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

/* Key i's value in this run: random bytes (any byte, CR and LF too) from
 * its own seed; from SOAK_HEADER bytes on, headed by the run, the key and
 * a checksum of the rest, so a wrong reply says whose value it carries. */
static void soak_value(uint64_t run, uint64_t run_seed, int i, size_t len,
                       char *out) {
    uint64_t st = (run_seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull)) | 1;
    size_t from = len >= SOAK_HEADER ? SOAK_HEADER : 0;
    for (size_t k = from; k < len; k++)
        out[k] = (char)(lab_rand(&st) >> 56);
    if (from) {
        char head[SOAK_HEADER + 1];
        snprintf(head, sizeof head, "%08x%08x%08x", (unsigned)run, (unsigned)i,
                 fnv1a(out + from, len - from));
        memcpy(out, head, SOAK_HEADER);
    }
}

enum { PH_SET, PH_GET, PH_DEL_EVEN, PH_EXISTS, PH_DEL_ODD };
static const char *const phase_name[] = {"SET", "GET", "DEL", "EXISTS", "DEL"};

typedef struct soak_run {
    uint64_t run, seed;
    int keys, conns, depth;
    uint16_t *len; /* each key's value length */
    long long count[SOAK_CONNS];
    int fd[SOAK_CONNS];
    reply_reader *rd[SOAK_CONNS];
    char *out;   /* one connection's window of requests */
    char *value; /* expected, then received */
    char *got;
    lab_soak_result *res;
} soak_run;

static size_t put_bulk(char *out, const char *p, size_t n) {
    size_t h = (size_t)sprintf(out, "$%zu\r\n", n);
    memcpy(out + h, p, n);
    memcpy(out + h + n, "\r\n", 2);
    return h + n + 2;
}

static size_t put_command(char *out, const char *cmd, const char *key,
                          const char *value, size_t vlen) {
    size_t n = (size_t)sprintf(out, "*%d\r\n", value ? 3 : 2);
    n += put_bulk(out + n, cmd, strlen(cmd));
    n += put_bulk(out + n, key, strlen(key));
    if (value) n += put_bulk(out + n, value, vlen);
    return n;
}

static int soak_fault(soak_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int soak_fault(soak_run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->why, sizeof r->res->why, fmt, ap);
    va_end(ap);
    return -EPROTO;
}

/* Reads one reply line and checks it is exactly want. */
static int expect_line(soak_run *r, int c, const char *want, const char *what) {
    char line[128];
    if (rr_line(r->rd[c], line, sizeof line) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    if (strcmp(line, want) != 0)
        return soak_fault(r, "%s: reply \"%.60s\", expected \"%s\"", what, line,
                          want);
    r->res->verified++;
    return 0;
}

static int expect_int(soak_run *r, int c, long long n, const char *what) {
    char want[32];
    snprintf(want, sizeof want, ":%lld", n);
    return expect_line(r, c, want, what);
}

/* Reads a bulk reply and checks it byte for byte against want; a value
 * with a header that differs is described by what it carries. */
static int expect_bulk(soak_run *r, int c, const char *want, size_t n,
                       const char *what) {
    char line[64];
    if (rr_line(r->rd[c], line, sizeof line) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    char *end;
    long long len = line[0] == '$' ? strtoll(line + 1, &end, 10) : -2;
    if (len < 0 || *end)
        return soak_fault(r, "%s: reply \"%.60s\", expected a %zu-byte bulk",
                          what, line, n);
    if ((size_t)len != n)
        return soak_fault(r, "%s: %lld bytes, expected %zu", what, len, n);
    char crlf[2];
    if (rr_bytes(r->rd[c], r->got, n) < 0 || rr_bytes(r->rd[c], crlf, 2) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    if (memcmp(crlf, "\r\n", 2) != 0)
        return soak_fault(r, "%s: no CRLF after the %zu bytes", what, n);
    if (memcmp(r->got, want, n) == 0) {
        r->res->verified++;
        return 0;
    }
    if (n < SOAK_HEADER)
        return soak_fault(r, "%s: %zu bytes differ from those written", what,
                          n);
    unsigned run = 0, key = 0, sum = 0;
    char head[SOAK_HEADER + 1];
    memcpy(head, r->got, SOAK_HEADER);
    head[SOAK_HEADER] = '\0';
    sscanf(head, "%8x%8x%8x", &run, &key, &sum);
    uint32_t actual = fnv1a(r->got + SOAK_HEADER, n - SOAK_HEADER);
    return soak_fault(r,
                      "%s: value differs: it carries run %u key %u, checksum "
                      "%s",
                      what, run, key, actual == sum ? "good" : "bad");
}

static void soak_key(const soak_run *r, int i, char *out, size_t size) {
    snprintf(out, size, "soak:%llu:%d", (unsigned long long)r->run, i);
}

/* One phase over every key it applies to, key i on connection i % conns:
 * each connection gets a window of up to depth requests, then every
 * window's replies are read and checked, in order. */
static int soak_phase(soak_run *r, int ph) {
    int next[SOAK_CONNS], pend[SOAK_CONNS][SOAK_DEPTH], npend[SOAK_CONNS];
    for (int c = 0; c < r->conns; c++)
        next[c] = c;
    char key[48], what[96];
    for (bool more = true; more;) {
        more = false;
        for (int c = 0; c < r->conns; c++) {
            size_t used = 0;
            npend[c] = 0;
            for (; next[c] < r->keys && npend[c] < r->depth;
                 next[c] += r->conns) {
                int i = next[c];
                if ((ph == PH_DEL_EVEN && i % 2) ||
                    (ph == PH_DEL_ODD && !(i % 2)))
                    continue;
                soak_key(r, i, key, sizeof key);
                if (ph == PH_SET) {
                    soak_value(r->run, r->seed, i, r->len[i], r->value);
                    used += put_command(r->out + used, "SET", key, r->value,
                                        r->len[i]);
                    char counter[48];
                    snprintf(counter, sizeof counter, "soak:%llu:count:%d",
                             (unsigned long long)r->run, c);
                    used +=
                        put_command(r->out + used, "INCR", counter, NULL, 0);
                } else {
                    used += put_command(r->out + used,
                                        ph == PH_GET      ? "GET"
                                        : ph == PH_EXISTS ? "EXISTS"
                                                          : "DEL",
                                        key, NULL, 0);
                }
                pend[c][npend[c]++] = i;
            }
            if (npend[c] == 0) continue;
            more |= next[c] < r->keys;
            kvs.sent += used;
            if (send_all(r->fd[c], r->out, used) < 0)
                return soak_fault(r, "%s: send on connection %d failed",
                                  phase_name[ph], c);
        }
        for (int c = 0; c < r->conns; c++)
            for (int k = 0; k < npend[c]; k++) {
                int i = pend[c][k], rc;
                soak_key(r, i, key, sizeof key);
                snprintf(what, sizeof what, "%s %s (%u bytes)", phase_name[ph],
                         key, (unsigned)r->len[i]);
                if (ph == PH_SET) {
                    rc = expect_line(r, c, "+OK", what);
                    if (rc == 0) {
                        snprintf(what, sizeof what,
                                 "INCR soak:%llu:count:%d after %s",
                                 (unsigned long long)r->run, c, key);
                        rc = expect_int(r, c, ++r->count[c], what);
                    }
                } else if (ph == PH_GET) {
                    soak_value(r->run, r->seed, i, r->len[i], r->value);
                    rc = expect_bulk(r, c, r->value, r->len[i], what);
                } else if (ph == PH_EXISTS) {
                    rc = expect_int(r, c, i % 2, what); /* evens deleted */
                } else {
                    rc = expect_int(r, c, 1, what);
                }
                if (rc < 0) return rc;
            }
    }
    return 0;
}

static int soak_dbsize(soak_run *r, long long want, const char *when) {
    static const char req[] = "*1\r\n$6\r\nDBSIZE\r\n";
    if (send_all(r->fd[0], req, sizeof req - 1) < 0)
        return soak_fault(r, "DBSIZE %s: send failed", when);
    char what[64];
    snprintf(what, sizeof what, "DBSIZE %s", when);
    return expect_int(r, 0, want, what);
}

/* The counters: GET each (the number of SETs its connection made), then
 * DEL it. */
static int soak_counters(soak_run *r, bool del) {
    for (int c = 0; c < r->conns; c++) {
        char counter[48], want[24], what[80];
        snprintf(counter, sizeof counter, "soak:%llu:count:%d",
                 (unsigned long long)r->run, c);
        size_t n = put_command(r->out, del ? "DEL" : "GET", counter, NULL, 0);
        if (send_all(r->fd[0], r->out, n) < 0)
            return soak_fault(r, "GET %s: send failed", counter);
        snprintf(what, sizeof what, "%s %s", del ? "DEL" : "GET", counter);
        int len = snprintf(want, sizeof want, "%lld", r->count[c]);
        int rc = del ? expect_int(r, 0, 1, what)
                     : expect_bulk(r, 0, want, (size_t)len, what);
        if (rc < 0) return rc;
    }
    return 0;
}

/* The text of `INFO <section>` from fd; 0 or -1. */
static int kv_info(int fd, const char *section, char *buf, size_t size) {
    char req[64];
    int n = snprintf(req, sizeof req, "*2\r\n$4\r\nINFO\r\n$%zu\r\n%s\r\n",
                     strlen(section), section);
    if (send_all(fd, req, (size_t)n) < 0) return -1;
    reply_reader *r = malloc(sizeof *r);
    if (!r) return -1;
    r->fd = fd;
    r->pos = r->len = 0;
    char head[32];
    int rc = rr_line(r, head, sizeof head);
    long len = rc == 0 && head[0] == '$' ? strtol(head + 1, NULL, 10) : -1;
    /* One reply at a time: nothing follows it in the reader. */
    if (len < 0 || (size_t)len + 2 > size ||
        rr_bytes(r, buf, (size_t)len + 2) < 0)
        rc = -1;
    else
        buf[len] = '\0';
    free(r);
    return rc;
}

/* lull-kv's RSS, open fds and write log, read once it has closed every
 * connection but the one asking (connected_clients:1, up to 2 s): a
 * client's close reaches it a moment after ours. */
static int kv_measure(long *rss_kb, int *fds, long long *log_b) {
    int fd = client_connect(kvs.srv.port);
    if (fd < 0) return -1;
    char text[4096];
    for (int waited = 0; waited < 2000; waited += 2) {
        if (kv_info(fd, "clients", text, sizeof text) < 0) break;
        if (info_number(text, "connected_clients") == 1) break;
        sleep_ms(2);
    }
    *log_b = kv_info(fd, "replication", text, sizeof text) == 0
                 ? info_number(text, "master_repl_offset")
                 : -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)kvs.srv.pid);
    long pages = 0, resident = -1;
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    *rss_kb = resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)kvs.srv.pid);
    DIR *d = opendir(path);
    *fds = -1;
    if (d) {
        *fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') (*fds)++;
        closedir(d);
    }
    close(fd);
    return 0;
}

/* Measures this lull-kv against its warm-up, prints the figures when print,
 * and stops it. -EPROTO when its open fds changed. */
static int kv_life_end(lab_soak_result *out, bool print) {
    int rc = 0;
    if (kvs.life_runs > 0 &&
        kv_measure(&kvs.rss_kb[1], &kvs.fds[1], &kvs.log_b[1]) == 0) {
        /* RSS gets no verdict: the write log holds every SET, INCR and DEL
         * (docs/KV.md), so lull-kv's memory grows with the runs by design;
         * the log's growth is printed beside it. Its fds must not grow by
         * one. */
        if (print)
            printf("  lull-kv          RSS %.1f MB -> %.1f MB, write log "
                   "%.1f -> %.1f MB (kept by design: not compared); open fds "
                   "%d -> %d; %d process%s (a fresh one every %llu MB of "
                   "requests)\n",
                   (double)kvs.rss_kb[0] / 1024, (double)kvs.rss_kb[1] / 1024,
                   (double)kvs.log_b[0] / 1048576,
                   (double)kvs.log_b[1] / 1048576, kvs.fds[0], kvs.fds[1],
                   kvs.lives, kvs.lives == 1 ? "" : "es", SOAK_LOG_LIMIT >> 20);
        if (kvs.fds[1] != kvs.fds[0]) {
            snprintf(out->why, sizeof out->why,
                     "lull-kv's open fds %d -> %d after its warm-up",
                     kvs.fds[0], kvs.fds[1]);
            rc = -EPROTO;
        }
    }
    server_stop(&kvs.srv);
    kvs.started = false;
    return rc;
}

int lab_serve_soak(uint64_t *seed, lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    if (kvs.started && kvs.sent >= SOAK_LOG_LIMIT) {
        int rc = kv_life_end(out, false);
        if (rc < 0) return rc;
    }
    if (!kvs.started) {
        char why[sizeof kv_path + 64];
        if (!kv_available(why, sizeof why)) {
            snprintf(out->why, sizeof out->why, "lull-kv %.200s", why);
            return LAB_SOAK_SKIPPED;
        }
        if (kvs.lives == 0) guard_children(true);
        if (!start_kv(&kvs.srv, NULL, -1)) {
            snprintf(out->why, sizeof out->why, "lull-kv: %s", kvs.srv.why);
            if (kvs.lives == 0) guard_children(false);
            return -EIO;
        }
        kvs.started = true;
        kvs.lives++;
        kvs.life_runs = 0;
        kvs.sent = 0;
    }
    soak_run r = {.run = kvs.runs, .seed = lab_rand(seed), .res = out};
    /* Many small runs, some large: keys 100–5,000 and the longest value
     * 0–2,000 bytes, each skewed low (a random bound, then a value under
     * it), since lull-kv keeps every write in its log (docs/KV.md). */
    r.keys = 100 + (int)(lab_rand(seed) % (1 + lab_rand(seed) % 4901));
    r.conns = 1 + (int)(lab_rand(seed) % SOAK_CONNS);
    r.depth = 1 + (int)(lab_rand(seed) % SOAK_DEPTH);
    int vmax =
        (int)(lab_rand(seed) % (1 + lab_rand(seed) % (SOAK_VALUE_MAX + 1)));
    r.len = malloc((size_t)r.keys * sizeof *r.len);
    r.out = malloc((size_t)SOAK_DEPTH * (SOAK_VALUE_MAX + 256));
    r.value = malloc(SOAK_VALUE_MAX);
    r.got = malloc(SOAK_VALUE_MAX);
    for (int c = 0; c < SOAK_CONNS; c++)
        r.fd[c] = -1;
    int rc = r.len && r.out && r.value && r.got ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < r.keys; i++)
        r.len[i] = (uint16_t)(lab_rand(seed) % ((uint64_t)vmax + 1));
    snprintf(out->sizes, sizeof out->sizes,
             "%d keys, values 0-%d bytes, %d connection%s, pipeline %d", r.keys,
             vmax, r.conns, r.conns == 1 ? "" : "s", r.depth);
    for (int c = 0; rc == 0 && c < r.conns; c++) {
        r.rd[c] = malloc(sizeof *r.rd[c]);
        r.fd[c] = client_connect(kvs.srv.port);
        if (!r.rd[c] || r.fd[c] < 0) {
            rc = exited(kvs.srv.pid) ? -ECHILD : -ECONNREFUSED;
            snprintf(out->why, sizeof out->why, "lull-kv: %s",
                     rc == -ECHILD ? "exited" : "refused a connection");
            break;
        }
        r.rd[c]->fd = r.fd[c];
        r.rd[c]->pos = r.rd[c]->len = 0;
    }
    if (rc == 0) rc = soak_dbsize(&r, 0, "before the run (the last left none)");
    if (rc == 0) rc = soak_phase(&r, PH_SET);
    if (rc == 0) rc = soak_counters(&r, false);
    if (rc == 0) rc = soak_phase(&r, PH_GET);
    if (rc == 0) rc = soak_counters(&r, true);
    if (rc == 0) rc = soak_phase(&r, PH_DEL_EVEN);
    if (rc == 0) rc = soak_dbsize(&r, r.keys / 2, "after deleting the evens");
    if (rc == 0) rc = soak_phase(&r, PH_EXISTS);
    if (rc == 0) rc = soak_phase(&r, PH_DEL_ODD);
    if (rc == 0) rc = soak_dbsize(&r, 0, "after deleting all");
    for (int c = 0; c < SOAK_CONNS; c++) {
        if (r.fd[c] >= 0) close(r.fd[c]);
        free(r.rd[c]);
    }
    free(r.len);
    free(r.out);
    free(r.value);
    free(r.got);
    kvs.runs++;
    if (rc == 0 && kvs.life_runs++ == 0 &&
        kv_measure(&kvs.rss_kb[0], &kvs.fds[0], &kvs.log_b[0]) < 0) {
        snprintf(out->why, sizeof out->why,
                 "lull-kv: INFO after warm-up failed");
        rc = -EIO;
    }
    return rc;
}

int lab_serve_soak_end(lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    int rc = kvs.started ? kv_life_end(out, true) : 0;
    if (kvs.lives > 0) guard_children(false);
    return rc;
}

const lab_scenario lab_serve = {
    "serve",
    "a Redis-protocol server: lull-kv beside redis-server under "
    "redis-benchmark (ping, set, "
    "get at -P 1 and 16), and a replica catching up while the primary "
    "answers pings",
    run_serve,
};
