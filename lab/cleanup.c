/* The temporary directories a scenario has on disk (the pump's journal,
 * the files scenario's names, serve's TLS key) and the temporary file
 * --json is written into (lab/main.c), removed should SIGINT,
 * SIGTERM, SIGHUP or SIGPIPE end lull-lab before the scenario removes
 * them itself; then the signal is raised again, so lull-lab still dies
 * of it (lab.h). And the check that stdout's reader is still there.
 *
 * A scenario's thread notes and forgets a directory; the handler may run
 * on any thread, so it uses system calls only (getdents64, unlinkat,
 * rmdir), no stdio and no allocation. A slot's path is written before
 * its flag is set and the flag cleared before the path changes. */
#include "lab.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TMP_SLOTS 8 /* a scenario has 2 at once at most; room to spare */

static struct {
    char path[PATH_MAX]; /* a long $TMPDIR or --json path is noted too */
    volatile sig_atomic_t used;
} tmp_dirs[TMP_SLOTS];

void lab_tmp_note(const char *dir) {
    if (strlen(dir) >= sizeof tmp_dirs[0].path) return;
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (tmp_dirs[i].used) continue;
        memcpy(tmp_dirs[i].path, dir, strlen(dir) + 1);
        __atomic_store_n(&tmp_dirs[i].used, 1, __ATOMIC_RELEASE);
        return;
    }
}

void lab_tmp_forget(const char *dir) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (tmp_dirs[i].used && strcmp(tmp_dirs[i].path, dir) == 0)
            __atomic_store_n(&tmp_dirs[i].used, 0, __ATOMIC_RELEASE);
}

/* Empties the directory open at fd, a subdirectory at a time (depth
 * bounds the recursion: the deepest lull-lab makes is 2), and closes fd. */
static void empty_dir(int fd, int depth) {
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            off += d->d_reclen;
            const char *name = d->d_name;
            if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
                continue;
            if (unlinkat(fd, name, 0) == 0 || depth == 0) continue;
            int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
            if (sub < 0) continue;
            empty_dir(sub, depth - 1);
            unlinkat(fd, name, AT_REMOVEDIR);
        }
    }
    close(fd);
}

/* The process that set the handlers: a forked measuring child inherits
 * them, and its death by a signal must not remove the directories the
 * parent still uses. */
static pid_t owner;

static void on_signal(int sig) {
    for (int i = 0; i < TMP_SLOTS && getpid() == owner; i++) {
        if (!__atomic_load_n(&tmp_dirs[i].used, __ATOMIC_ACQUIRE)) continue;
        /* A file (--json's temporary file) goes at once. */
        if (unlink(tmp_dirs[i].path) == 0) continue;
        /* A thread of the scenario may add a name meanwhile: a few
         * passes, until the directory itself goes. */
        for (int pass = 0; pass < 4 && rmdir(tmp_dirs[i].path) != 0; pass++) {
            int fd = open(tmp_dirs[i].path,
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) break;
            empty_dir(fd, 2);
        }
    }
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when this handler returns */
}

void lab_tmp_guard(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    owner = getpid();
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction was;
        /* One ignored at start (a background job's SIGINT, SIGPIPE
         * under some supervisors) stays so. */
        if (sigaction(sigs[i], NULL, &was) != 0 || was.sa_handler == SIG_IGN)
            continue;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
            sigaddset(&sa.sa_mask, sigs[k]); /* one cleanup at a time */
        sigaction(sigs[i], &sa, NULL);
    }
}

/* stdout a pipe whose reader has left (`lull-lab all | head -1`): the
 * kernel reports POLLERR on the write end. The run ends as the next
 * line's write would end it, by SIGPIPE, rather than after the rest of
 * the scenario's rounds (a minute and more) when its table prints. */
void lab_stdout_check(void) {
    struct pollfd p = {.fd = STDOUT_FILENO};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) raise(SIGPIPE);
}
