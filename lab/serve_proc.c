/* The processes the `serve` scenario starts (lab/serve.h): every child is
 * in a table, killed on every exit path, on SIGINT/SIGTERM/SIGHUP (the
 * handler kills them, then re-raises), and by the kernel should lull-lab
 * die (PR_SET_PDEATHSIG); the tools found on PATH and their versions; a
 * blocking client for PING, INFO and loading keys; and the two servers,
 * lull-kv on a port of its choosing (read from its "listening on" line)
 * and redis-server on one the kernel just handed out (restarted on
 * another if it fails to bind); and the helpers every figure of the
 * scenario shares (--only, CPU time and status from /proc, a pinned
 * client thread, INFO, a short-table row). It calls no other file of the
 * scenario. One thread. */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *const server_name[SERVERS] = {"lull-kv", "redis-server"};
const char *const server_key[SERVERS] = {"lull_kv", "redis_server"};
const char *const test_csv[TESTS] = {"PING_MBULK", "SET", "GET"};
const char *const test_key[TESTS] = {"ping_mbulk", "set", "get"};
const int depth[DEPTHS] = {1, 16};

/* ------------------------------------------------------------ serve_children
 */

/* Every process this scenario started and has not reaped yet. */
volatile pid_t serve_children[MAX_CHILDREN];
static struct sigaction saved_action[3];
static const int caught[3] = {SIGINT, SIGTERM, SIGHUP};

void serve_kill_all_children(void) {
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (serve_children[i] > 0) kill(serve_children[i], SIGKILL);
}

/* redis-server's working directories (empty while it runs with
 * persistence off), removed by the signal handler too. */
static char work_dirs[MAX_CHILDREN][64];

static void on_signal(int sig) {
    serve_kill_all_children();
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (work_dirs[i][0]) rmdir(work_dirs[i]);
    /* Then the action it replaced (lull-lab's: the temporary
     * directories, lab/cleanup.c), once this handler returns. */
    for (int i = 0; i < 3; i++)
        if (caught[i] == sig) sigaction(sig, &saved_action[i], NULL);
    raise(sig);
}

void serve_guard_children(bool on) {
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
int serve_cpu_server = -1, serve_cpu_client = -1;

void serve_choose_cpus(void) {
    cpu_set_t set;
    serve_cpu_server = serve_cpu_client = -1;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE && serve_cpu_client < 0; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        if (serve_cpu_server < 0)
            serve_cpu_server = c;
        else
            serve_cpu_client = c;
    }
    if (serve_cpu_client < 0) serve_cpu_server = -1;
}

/* Starts path with args, its stdout and stderr on out_fd (-1: /dev/null),
 * pinned to cpu (-1: not pinned). Returns its pid, or a negative errno. */
pid_t serve_spawn(char *const *args, int out_fd, int cpu) {
    int slot = -1;
    for (int i = 0; i < MAX_CHILDREN && slot < 0; i++)
        if (serve_children[i] <= 0) slot = i;
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
    serve_children[slot] = pid;
    return pid;
}

void serve_forget(pid_t pid) {
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (serve_children[i] == pid) serve_children[i] = 0;
}

/* Reaps pid if it has exited; true when it has (or is unknown). */
bool serve_exited(pid_t pid) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == 0) return false;
    serve_forget(pid);
    return true;
}

void serve_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    serve_forget(pid);
}

void serve_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* An unlinked temporary file for a child's output: a child writing much
 * never blocks on it, and its first lines are there to quote. Close-on-exec,
 * so that only its own child (through dup2) inherits it. */
int serve_temp_output(void) {
    char path[] = "/tmp/lull-lab-serve-XXXXXX";
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return -1;
    unlink(path);
    return fd;
}

/* The first line of what a child wrote (a server's "listening" line). */
void serve_first_line(int fd, char *buf, size_t size) {
    ssize_t n = pread(fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* The last line of what a child wrote, for why it exited: a server says
 * why it stops last (redis-server's "Fatal: Can't initialize Background
 * Jobs." under a low ulimit -u, after a banner of several lines). The
 * line's end is kept when it is longer than buf. */
void serve_last_line(int fd, char *buf, size_t size) {
    char text[1024];
    struct stat st;
    off_t at = fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof text - 1
                   ? st.st_size - (off_t)(sizeof text - 1)
                   : 0;
    ssize_t n = pread(fd, text, sizeof text - 1, at);
    n = n > 0 ? n : 0;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    text[n] = '\0';
    const char *line = strrchr(text, '\n');
    line = line ? line + 1 : text;
    size_t len = strlen(line);
    snprintf(buf, size, "%s", len >= size ? line + len - (size - 1) : line);
}

static double seconds(struct timeval tv) {
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* A running process's CPU time so far (user + system, seconds) and its
 * voluntary context switches (each one a sleep: for a server, a wait in
 * epoll_wait with nothing ready). False when /proc cannot say. */
bool serve_proc_cpu(pid_t pid, double *cpu_s, long *sleeps) {
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
int serve_run_capture(char *const *args, char *buf, size_t size, int timeout_ms,
                      int cpu, double *cpu_s) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    pid_t pid = serve_spawn(args, pipefd[1], cpu);
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
    serve_forget(pid);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        rc = -ECHILD;
    if (cpu_s) *cpu_s = seconds(ru.ru_utime) + seconds(ru.ru_stime);
    return rc;
}

/* redis-benchmark's runs: --csv prints a test's line when it ends, and on
 * a busy machine a full-size test of one key at -P 1 can take minutes;
 * at --quick sizes a run takes a second or two (on a loaded 2-CPU
 * machine), so 30 s of silence is a hang there. The first run that hangs
 * is killed with a line and no later run is started: each waited out its
 * own silence, one after another, for hours. */
#define BENCH_QUICK_MS 30000
#define BENCH_FULL_MS  300000
static int bench_ms = BENCH_FULL_MS;
static bool bench_hung;

void serve_bench_sizes(bool quick) {
    bench_ms = quick ? BENCH_QUICK_MS : BENCH_FULL_MS;
}

int serve_bench_silence_ms(void) {
    return bench_hung ? 0 : bench_ms;
}

void serve_bench_hung(void) {
    if (bench_hung) return;
    bench_hung = true;
    printf("  redis-benchmark printed nothing for %d s: killed; its later "
           "runs not started\n",
           bench_ms / 1000);
}

int serve_bench_run(char *const *args, char *buf, size_t size, int cpu,
                    double *cpu_s) {
    if (bench_hung) return -ETIMEDOUT;
    int rc = serve_run_capture(args, buf, size, bench_ms, cpu, cpu_s);
    if (rc == -ETIMEDOUT) serve_bench_hung();
    return rc;
}

/* ------------------------------------------------------------- finding */

char serve_kv_path[512], serve_redis_path[512], serve_bench_path[512];
static char redis_version[32], bench_version[32];

bool serve_on_path(const char *name, char *out, size_t size) {
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

/* --kv PATH, else the lull-kv installed beside lull-lab, else the one this
 * build made (its path is compiled in when kv/ is built). */
const char *serve_kv_option;

bool serve_kv_available(char *why, size_t size) {
    const char *p = serve_kv_option;
#ifdef LAB_KV_PATH
    const char *built = LAB_KV_PATH;
#else
    const char *built = NULL;
#endif
    static char installed[4096];
    if (!p)
        p = lab_installed_path("bin/lull-kv", built, installed,
                               sizeof installed);
    if (!p) {
        snprintf(why, size, "not built (kv/ off; --kv PATH names one)");
        return false;
    }
    snprintf(serve_kv_path, sizeof serve_kv_path, "%s", p);
    if (access(serve_kv_path, X_OK) != 0) {
        snprintf(why, size, "%s not found", serve_kv_path);
        return false;
    }
    return true;
}

/* "Redis server v=7.0.15 sha=..." and "redis-benchmark 7.0.15". */
static bool tool_version(char *path, const char *marker, char *out,
                         size_t size) {
    char *args[] = {path, "--version", NULL};
    char buf[256];
    if (serve_run_capture(args, buf, sizeof buf, 5000, -1, NULL) != 0)
        return false;
    const char *v = strstr(buf, marker);
    if (!v) return false;
    v += strlen(marker);
    snprintf(out, size, "%.*s", (int)strcspn(v, " \n"), v);
    return true;
}

bool serve_redis_available(char *why, size_t size) {
    if (!serve_on_path("redis-server", serve_redis_path,
                       sizeof serve_redis_path)) {
        snprintf(why, size, "not on PATH");
        return false;
    }
    if (!tool_version(serve_redis_path, "v=", redis_version,
                      sizeof redis_version)) {
        snprintf(why, size, "`redis-server --version` failed");
        return false;
    }
    return true;
}

bool serve_bench_available(char *why, size_t size) {
    if (!serve_on_path("redis-benchmark", serve_bench_path,
                       sizeof serve_bench_path)) {
        snprintf(why, size, "not on PATH");
        return false;
    }
    if (!tool_version(serve_bench_path, "redis-benchmark ", bench_version,
                      sizeof bench_version)) {
        snprintf(why, size, "`redis-benchmark --version` failed");
        return false;
    }
    return true;
}

const char *serve_get_redis_version(void) {
    return redis_version;
}
const char *serve_get_bench_version(void) {
    return bench_version;
}

/* ---------------------------------------------------------- the client */

/* A blocking connection to 127.0.0.1:port with 30 s timeouts, or -1: a
 * hung server ends the run, a slow one does not (a debug build moving
 * 64 MiB beside a whole test suite took over 5 s). */
int serve_client_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {30, 0};
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

int serve_send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int serve_recv_exact(int fd, char *p, size_t n) {
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
bool serve_answers_ping(int port) {
    int fd = serve_client_connect(port);
    if (fd < 0) return false;
    char reply[8];
    bool ok = serve_send_all(fd, "*1\r\n$4\r\nPING\r\n", 14) == 0 &&
              serve_recv_exact(fd, reply, 7) == 0 &&
              memcmp(reply, "+PONG\r\n", 7) == 0;
    close(fd);
    return ok;
}

/* The text of `INFO replication` from fd into buf; 0 or -1. */
int serve_info_replication(int fd, char *buf, size_t size) {
    static const char req[] = "*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";
    if (serve_send_all(fd, req, sizeof req - 1) < 0) return -1;
    char head[32];
    size_t h = 0;
    while (h < sizeof head - 1) { /* "$<len>\r\n" */
        if (serve_recv_exact(fd, head + h, 1) < 0) return -1;
        if (head[h++] == '\n') break;
    }
    head[h] = '\0';
    if (head[0] != '$') return -1;
    long len = strtol(head + 1, NULL, 10);
    if (len < 0 || (size_t)len + 2 > size) return -1;
    if (serve_recv_exact(fd, buf, (size_t)len + 2) < 0) return -1;
    buf[len] = '\0';
    return 0;
}

/* The integer after "name:" at the start of a line of an INFO text, or
 * -1. */
long long serve_info_number(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, name, n) == 0 && p[n] == ':')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

bool serve_info_has(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, line, n) == 0 && (p[n] == '\r' || p[n] == '\n'))
            return true;
    return false;
}

/* Writes keys "key:%08d" with value_size-byte values, pipelined in
 * batches whose replies (+OK) fit the socket buffers whatever the server
 * does with its output. Returns 0 or -1. */
int serve_load_keys(int port, int keys, int value_size) {
    enum { BATCH = 4096 };
    int fd = serve_client_connect(port);
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
        if (serve_send_all(fd, out, used) < 0 ||
            serve_recv_exact(fd, in, (size_t)n * 5) < 0)
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

void serve_server_stop(server *s) {
    serve_stop(s->pid);
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
int serve_free_port(void) {
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
bool serve_server_ready(server *s, bool read_port) {
    for (int waited = 0; waited < 10000; waited += 5) {
        if (serve_exited(s->pid)) {
            char line[120];
            serve_last_line(s->out_fd, line, sizeof line);
            snprintf(s->why, sizeof s->why, "exited at start: %s",
                     line[0] ? line : "it printed nothing");
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
        if (s->port > 0 && serve_answers_ping(s->port)) return true;
        serve_sleep_ms(5);
    }
    snprintf(s->why, sizeof s->why, "did not answer PING within 10 s");
    return false;
}

/* lull-kv on a port of its choosing, with extra arguments (NULL-ended). */
bool serve_start_kv(server *s, const char *const *extra, int cpu) {
    memset(s, 0, sizeof *s);
    char *args[32] = {serve_kv_path, "--port", "0"};
    int n = 3;
    for (int i = 0; extra && extra[i]; i++) {
        if (n == 31) { /* never cut a caller's options short */
            snprintf(s->why, sizeof s->why, "more than 28 options");
            return false;
        }
        args[n++] = (char *)extra[i];
    }
    args[n] = NULL;
    s->out_fd = serve_temp_output();
    s->pid = serve_spawn(args, s->out_fd, cpu);
    if (s->pid < 0) {
        snprintf(s->why, sizeof s->why, "cannot start: %s", strerror(-s->pid));
        s->pid = 0;
        return false;
    }
    if (serve_server_ready(s, true)) return true;
    serve_server_stop(s);
    return false;
}

/* Starts redis-server, persistence off, one I/O thread; replica_of > 0
 * makes it a replica of 127.0.0.1:replica_of; extra (NULL-ended, may be
 * NULL) follows the rest. */
bool serve_spawn_redis_with(server *s, int replica_of, int cpu, int bgsave_cpu,
                            const char *const *extra) {
    memset(s, 0, sizeof *s);
    s->out_fd = serve_temp_output();
    snprintf(s->dir, sizeof s->dir, "/tmp/lull-lab-redis-XXXXXX");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = '\0';
        snprintf(s->why, sizeof s->why, "mkdtemp: %s", strerror(errno));
        serve_server_stop(s);
        return false;
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (!work_dirs[i][0]) {
            memcpy(work_dirs[i], s->dir, sizeof s->dir);
            break;
        }
    s->port = serve_free_port();
    char port[16], master[16];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(master, sizeof master, "%d", replica_of);
    char *args[32] = {serve_redis_path, "--save", "", "--appendonly", "no",
                      "--io-threads", "1", "--port", port, "--bind",
                      "127.0.0.1", "--dir", s->dir, "--daemonize", "no",
                      /* Sync at once (not after 5 s, waiting for more
                       * replicas), and load it from the socket. */
                      "--repl-diskless-sync-delay", "0", "--repl-diskless-load",
                      "on-empty-db"};
    int n = 19;
    char bgsave[16];
    if (bgsave_cpu >= 0) {
        snprintf(bgsave, sizeof bgsave, "%d", bgsave_cpu);
        args[n++] = "--bgsave_cpulist";
        args[n++] = bgsave;
    }
    if (replica_of > 0) {
        args[n++] = "--replicaof";
        args[n++] = "127.0.0.1";
        args[n++] = master;
    }
    for (int i = 0; extra && extra[i] && n < 31; i++)
        args[n++] = (char *)extra[i];
    args[n] = NULL;
    s->pid = serve_spawn(args, s->out_fd, cpu);
    if (s->pid < 0) {
        snprintf(s->why, sizeof s->why, "cannot start: %s", strerror(-s->pid));
        s->pid = 0;
        serve_server_stop(s);
        return false;
    }
    return true;
}

bool serve_spawn_redis(server *s, int replica_of, int cpu, int bgsave_cpu) {
    return serve_spawn_redis_with(s, replica_of, cpu, bgsave_cpu, NULL);
}

/* spawn_redis, then waits for PING. A port taken meanwhile by someone
 * else makes it exit at once: it is tried on another (three times). */
bool serve_start_redis_with(server *s, int replica_of, int cpu, int bgsave_cpu,
                            const char *const *extra) {
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!serve_spawn_redis_with(s, replica_of, cpu, bgsave_cpu, extra))
            return false;
        if (serve_server_ready(s, false)) return true;
        serve_server_stop(s);
    }
    return false;
}

bool serve_start_redis(server *s, int replica_of, int cpu, int bgsave_cpu) {
    return serve_start_redis_with(s, replica_of, cpu, bgsave_cpu, NULL);
}

/* ------------------------------------------------ helpers of the rows */

bool serve_wants(const lab_options *opts, const char *name) {
    return !opts->only || strcmp(opts->only, name) == 0;
}

/* ---------------------------------------------------------------- /proc */

bool serve_cpu_ns(pid_t pid, uint64_t *ns) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    uint64_t sum = 0;
    bool any = false;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char file[128];
        snprintf(file, sizeof file, "%.63s/%.32s/schedstat", path, e->d_name);
        FILE *f = fopen(file, "re");
        unsigned long long on_cpu;
        if (f && fscanf(f, "%llu", &on_cpu) == 1) {
            sum += on_cpu;
            any = true;
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    if (!any) { /* a kernel without schedstat: stat's ticks */
        double s;
        long sleeps;
        if (!serve_proc_cpu(pid, &s, &sleeps)) return false;
        sum = (uint64_t)(s * 1e9);
    }
    *ns = sum;
    return true;
}

long long serve_status_field(pid_t pid, const char *name) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    size_t n = strlen(name);
    long long v = -1;
    while (v < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            v = strtoll(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

/* --------------------------------------------------------------- threads */

int serve_run_pinned(int cpu, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    pthread_t t;
    int err = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (err) return -err;
    void *rc;
    pthread_join(t, &rc);
    return (int)(intptr_t)rc;
}

/* ------------------------------------------------------------------ INFO */

int serve_info(int fd, const char *section, char *buf, size_t size) {
    char req[96];
    int n = snprintf(req, sizeof req, "*2\r\n$4\r\nINFO\r\n$%zu\r\n%s\r\n",
                     strlen(section), section);
    if (serve_send_all(fd, req, (size_t)n) < 0) return -1;
    char head[32];
    size_t h = 0;
    while (h < sizeof head - 1) { /* "$<len>\r\n" */
        if (serve_recv_exact(fd, head + h, 1) < 0) return -1;
        if (head[h++] == '\n') break;
    }
    head[h] = '\0';
    if (head[0] != '$') return -1;
    long len = strtol(head + 1, NULL, 10);
    if (len < 0 || (size_t)len + 2 > size) return -1;
    if (serve_recv_exact(fd, buf, (size_t)len + 2) < 0) return -1;
    buf[len] = '\0';
    return 0;
}

/* ---------------------------------------------------------- short table */

void serve_brief_row(lab_table *t, const char *label, double kv, double redis,
                     double ratio) {
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    int row = lab_table_row(t);
    if (row < 0) return;
    lab_table_set(t, row, 0, "%s", label);
    lab_table_set(t, row, 1, "%s", isfinite(kv) ? lab_fmt(a, kv) : "–");
    lab_table_set(t, row, 2, "%s", isfinite(redis) ? lab_fmt(b, redis) : "–");
    lab_table_set(t, row, 3, "%s", lab_fmt_ratio(c, ratio));
}
