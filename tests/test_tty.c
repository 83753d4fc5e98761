/* Terminals (src/tty.c), on a pty this case opens itself (posix_openpt),
 * never the machine's own terminal: modes set and given back (on close,
 * by lull_tty_reset_mode, in a process that crashes), bytes both ways, the
 * window size and SIGWINCH, the caller's fd flags left alone, a master fd
 * with no name, a terminal that hangs up, and bad arguments. Every wait is
 * bounded by a guard timer. */
#include "check.h"
#include "stdio_gone.h"

#include "polls.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define GUARD_NS (20 * 1000000000ull)

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    return loop;
}

static void free_loop(lull_loop *loop) {
    int rc = lull_loop_free(loop);
    if (rc != 0) lull_loop_print_live(loop, stderr);
    CHECK_EQ(rc, 0);
}

static void guard_fired(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "no progress in 20 s");
}

/* Runs iterations until *v >= want. */
static void run_until(lull_loop *loop, const int *v, int want) {
    lull_timer guard;
    lull_timer_init(loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    lull_timer_unref(&guard);
    while (*v < want)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
}

typedef struct pty {
    int master;
    int slave;
} pty;

static pty pty_open(void) {
    pty p;
    p.master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(p.master >= 0);
    CHECK_EQ(grantpt(p.master), 0);
    CHECK_EQ(unlockpt(p.master), 0);
    char name[128];
    CHECK_EQ(ptsname_r(p.master, name, sizeof name), 0);
    p.slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(p.slave >= 0);
    return p;
}

static void pty_close(pty *p) {
    if (p->master >= 0) close(p->master);
    if (p->slave >= 0) close(p->slave);
}

/* The mode's own fields: what tcsetattr sets. */
static bool same_mode(const struct termios *a, const struct termios *b) {
    return a->c_iflag == b->c_iflag && a->c_oflag == b->c_oflag &&
           a->c_cflag == b->c_cflag && a->c_lflag == b->c_lflag &&
           memcmp(a->c_cc, b->c_cc, sizeof a->c_cc) == 0;
}

static struct termios mode_of(int fd) {
    struct termios t;
    CHECK_EQ(tcgetattr(fd, &t), 0);
    return t;
}

/* Whether fd's mode is `want` (again). */
static bool mode_is(int fd, const struct termios *want) {
    struct termios now = mode_of(fd);
    return same_mode(want, &now);
}

static bool is_raw(int fd) {
    struct termios t = mode_of(fd);
    return !(t.c_lflag & (ICANON | ECHO | ISIG));
}

/* A tty and what its stream read. */
typedef struct term {
    lull_tty t;
    char buf[4096];
    size_t len;
    int nread; /* len, as an int for run_until */
    int closes;
    int reason;
    int winches; /* SIGWINCH deliveries seen */
    bool close_in_frame;
} term;

static void term_frame(lull_endpoint *ep, const void *b, size_t n) {
    term *k = LULL_CONTAINER_OF(ep, term, t.stream.ep);
    CHECK(k->len + n < sizeof k->buf);
    memcpy(k->buf + k->len, b, n);
    k->len += n;
    k->buf[k->len] = '\0';
    k->nread = (int)k->len;
    if (k->close_in_frame) CHECK_EQ(lull_tty_close(&k->t), 0);
}

static void term_close(lull_endpoint *ep, int reason) {
    term *k = LULL_CONTAINER_OF(ep, term, t.stream.ep);
    k->closes++;
    k->reason = reason;
}

static void term_init(lull_loop *loop, term *k, int fd) {
    memset(k, 0, sizeof *k);
    CHECK_EQ(lull_tty_init(loop, &k->t, fd, NULL), 0);
    lull_endpoint_set_callbacks(&k->t.stream.ep, term_frame, NULL, term_close);
}

static void term_close_and_wait(lull_loop *loop, term *k) {
    CHECK_EQ(lull_tty_close(&k->t), 0);
    run_until(loop, &k->closes, 1);
}

/* Closes n ttys, then waits for each one's close callback. */
static void term_close_all(lull_loop *loop, term *k, int n) {
    for (int i = 0; i < n; i++)
        CHECK_EQ(lull_tty_close(&k[i].t), 0);
    for (int i = 0; i < n; i++)
        run_until(loop, &k[i].closes, 1);
}

/* A case's end: the loop freed (nothing left on it), the pty closed. */
static void finish(lull_loop *loop, pty *p) {
    free_loop(loop);
    pty_close(p);
}

/* A loop and a pty whose slave k holds in RAW; before: the slave's mode
 * before it. */
static lull_loop *loop_with_raw_term(pty *p, struct termios *before, term *k) {
    lull_loop *loop = new_loop();
    *p = pty_open();
    *before = mode_of(p->slave);
    term_init(loop, k, p->slave);
    CHECK_EQ(lull_tty_set_mode(&k->t, LULL_TTY_MODE_RAW), 0);
    return loop;
}

/* A loop and a pty whose master k holds: the shared description, which
 * k makes non-blocking while it holds it. *fl: the master's flags before
 * k, blocking. */
static lull_loop *loop_with_master_term(pty *p, int *fl, term *k) {
    lull_loop *loop = new_loop();
    *p = pty_open();
    *fl = fcntl(p->master, F_GETFL);
    CHECK(!(*fl & O_NONBLOCK));
    term_init(loop, k, p->master);
    CHECK(fcntl(p->master, F_GETFL) & O_NONBLOCK);
    return loop;
}

/* Reads from fd until `want` bytes came or 10 s passed. */
static size_t read_some(int fd, char *buf, size_t want) {
    size_t got = 0;
    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 10000) != 1) break;
        ssize_t n = read(fd, buf + got, want - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    return got;
}

static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;
}

/* ------------------------------------------------------------- modes */

/* RAW and IO change the mode, NORMAL gives the one from init back, and a
 * close in RAW gives it back too. */
TEST(raw_mode_set_and_restored) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct termios before = mode_of(p.slave);
    term k;
    term_init(loop, &k, p.slave);
    CHECK_EQ(k.t.mode, LULL_TTY_MODE_NORMAL);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0);
    CHECK(is_raw(p.slave));
    CHECK(mode_of(p.slave).c_oflag & OPOST); /* RAW keeps "\n" -> "\r\n" */
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_IO), 0);
    CHECK(is_raw(p.slave));
    CHECK(!(mode_of(p.slave).c_oflag & OPOST));
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_NORMAL), 0);
    CHECK(mode_is(p.slave, &before));
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0); /* again: 0 */
    term_close_and_wait(loop, &k);
    CHECK_EQ(k.reason, 0);
    CHECK(mode_is(p.slave, &before));
    finish(loop, &p);
}

/* lull_tty_reset_mode, called directly as an exit path would: the mode
 * comes back although the handle is still open and thinks it is raw; the
 * close afterwards restores again, harmlessly. */
TEST(reset_mode_restores_without_the_loop) {
    pty p;
    struct termios before;
    term k;
    lull_loop *loop = loop_with_raw_term(&p, &before, &k);
    CHECK(is_raw(p.slave));
    lull_tty_reset_mode();
    CHECK(mode_is(p.slave, &before));
    CHECK_EQ(k.t.mode, LULL_TTY_MODE_RAW);
    term_close_and_wait(loop, &k);
    CHECK(mode_is(p.slave, &before));
    lull_tty_reset_mode(); /* nothing entered: touches nothing */
    finish(loop, &p);
}

static void crash_handler(int sig) {
    (void)sig;
    lull_tty_reset_mode();
    _exit(42);
}

/* A process that sets RAW and then crashes (SIGSEGV, its handler calling
 * lull_tty_reset_mode and _exit) leaves the terminal as it found it. */
TEST(reset_mode_in_a_crash_handler) {
    pty p = pty_open();
    struct termios before = mode_of(p.slave);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = crash_handler;
        sigaction(SIGSEGV, &sa, NULL);
        lull_loop *loop = new_loop();
        term k;
        term_init(loop, &k, p.slave);
        CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_IO), 0);
        if (!is_raw(p.slave)) _exit(1);
        raise(SIGSEGV);
        _exit(2);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 42);
    CHECK(mode_is(p.slave, &before));
    pty_close(&p);
}

/* 64 ttys in a mode other than NORMAL fill the reset table: the 65th is
 * refused with -ENOSPC and left as it was; going back to NORMAL frees an
 * entry, and so does a close. */
TEST(reset_table_full) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    enum { N = 65 };
    term *k = calloc(N, sizeof *k);
    CHECK(k != NULL);
    for (int i = 0; i < N; i++)
        term_init(loop, &k[i], p.slave);
    for (int i = 0; i < N - 1; i++)
        CHECK_EQ(lull_tty_set_mode(&k[i].t, LULL_TTY_MODE_RAW), 0);
    CHECK_EQ(lull_tty_set_mode(&k[N - 1].t, LULL_TTY_MODE_RAW), -ENOSPC);
    CHECK_EQ(k[N - 1].t.mode, LULL_TTY_MODE_NORMAL);
    CHECK_EQ(lull_tty_set_mode(&k[0].t, LULL_TTY_MODE_NORMAL), 0);
    CHECK_EQ(lull_tty_set_mode(&k[N - 1].t, LULL_TTY_MODE_RAW), 0);
    CHECK_EQ(lull_tty_set_mode(&k[0].t, LULL_TTY_MODE_RAW), -ENOSPC);
    CHECK_EQ(lull_tty_close(&k[1].t), 0);
    CHECK_EQ(lull_tty_set_mode(&k[0].t, LULL_TTY_MODE_RAW), 0);
    term_close_all(loop, k, N);
    free(k);
    finish(loop, &p);
}

/* A second tty opened on the terminal (a dup of its fd) while the first
 * holds it in RAW: the mode it gives back is the one the terminal had
 * before lull changed it, not the first tty's RAW. Closed in either
 * order, or reset by lull_tty_reset_mode, the terminal ends as it was. */
static void second_tty_while_raw(int how) {
    pty p;
    struct termios before;
    term a, b;
    lull_loop *loop = loop_with_raw_term(&p, &before, &a);
    int fd2 = dup(p.slave);
    CHECK(fd2 >= 0);
    term_init(loop, &b, fd2);
    CHECK_EQ(lull_tty_set_mode(&b.t, LULL_TTY_MODE_IO), 0);
    if (how == 2) {
        lull_tty_reset_mode();
        CHECK(mode_is(p.slave, &before));
    }
    if (how == 1) {
        term_close_and_wait(loop, &b);
        term_close_and_wait(loop, &a);
    } else {
        term_close_and_wait(loop, &a);
        term_close_and_wait(loop, &b);
    }
    CHECK(mode_is(p.slave, &before));
    close(fd2);
    finish(loop, &p);
}

TEST(second_tty_on_a_raw_terminal_first_closed_first) {
    second_tty_while_raw(0);
}

TEST(second_tty_on_a_raw_terminal_second_closed_first) {
    second_tty_while_raw(1);
}

TEST(second_tty_on_a_raw_terminal_reset_mode) {
    second_tty_while_raw(2);
}

/* The second tty on /dev/tty, the alias of the controlling terminal
 * (device 5,0, whatever the terminal), while the first holds the
 * terminal by its own name in RAW: taken for another terminal, the second
 * gave back RAW, so that its close, or lull_tty_reset_mode, left the
 * terminal raw after the first had given NORMAL back. Run in a child of
 * its own session, whose controlling terminal is the pty's slave. */
static void dev_tty_body(void *arg) {
    (void)arg;
    /* The session leader: the master's close at the end hangs it up. */
    CHECK(signal(SIGHUP, SIG_IGN) != SIG_ERR);
    pty p = pty_open();
    CHECK(setsid() > 0);
    CHECK_EQ(ioctl(p.slave, TIOCSCTTY, 0), 0);
    int alias = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (alias < 0 && errno == ENOENT) { /* a /dev without the node */
        printf("skipped: no /dev/tty\n");
        pty_close(&p);
        return;
    }
    CHECK(alias >= 0);
    struct termios before = mode_of(p.slave);
    lull_loop *loop = new_loop();
    term a, b;
    for (int how = 0; how < 3; how++) {
        term_init(loop, &a, p.slave);
        CHECK_EQ(lull_tty_set_mode(&a.t, LULL_TTY_MODE_RAW), 0);
        term_init(loop, &b, alias);
        CHECK_EQ(lull_tty_set_mode(&b.t, LULL_TTY_MODE_IO), 0);
        if (how == 2) {
            lull_tty_reset_mode(); /* a crash path */
            CHECK(mode_is(p.slave, &before));
        }
        term *first = how == 1 ? &b : &a, *last = how == 1 ? &a : &b;
        term_close_and_wait(loop, first);
        term_close_and_wait(loop, last);
        CHECK(mode_is(p.slave, &before));
    }
    close(alias);
    finish(loop, &p);
}

TEST(second_tty_on_the_controlling_terminals_alias) {
    CHECK(check_exits_cleanly(dev_tty_body, NULL));
}

/* A tty on a pty's master and one on its slave are one terminal: the
 * master's mode calls set the slave's mode, and TIOCGDEV names the
 * slave's device on either fd. Known by the master's pty number too, the
 * master was taken for another terminal, so that the second tty saved the
 * first one's RAW as its mode before lull and gave it back at its close,
 * or in lull_tty_reset_mode, after the first had given NORMAL back. Every
 * order ends with the mode from before. */
static void master_and_slave(bool master_first) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct termios before = mode_of(p.slave);
    int fd_a = master_first ? p.master : p.slave;
    int fd_b = master_first ? p.slave : p.master;
    term a, b;
    for (int how = 0; how < 3; how++) {
        term_init(loop, &a, fd_a);
        CHECK_EQ(lull_tty_set_mode(&a.t, LULL_TTY_MODE_RAW), 0);
        term_init(loop, &b, fd_b);
        CHECK_EQ(lull_tty_set_mode(&b.t, LULL_TTY_MODE_IO), 0);
        if (how == 2) {
            lull_tty_reset_mode(); /* a crash path */
            CHECK(mode_is(p.slave, &before));
        }
        term *first = how == 1 ? &b : &a, *last = how == 1 ? &a : &b;
        term_close_and_wait(loop, first);
        term_close_and_wait(loop, last);
        CHECK(mode_is(p.slave, &before));
    }
    finish(loop, &p);
}

TEST(ttys_on_a_ptys_master_then_its_slave_are_one_terminal) {
    master_and_slave(true);
}

TEST(ttys_on_a_ptys_slave_then_its_master_are_one_terminal) {
    master_and_slave(false);
}

/* ------------------------------------------------------------ bytes */

/* What lull sends arrives on the master; what the master writes arrives
 * as on_frame, at once in RAW (no line to wait for). */
TEST(bytes_both_ways) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    term k;
    term_init(loop, &k, p.slave);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_IO), 0);
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "hello\n", 6), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    char buf[16] = {0};
    CHECK_EQ(read_some(p.master, buf, 6), 6);
    CHECK(memcmp(buf, "hello\n", 6) == 0);     /* IO: no "\r" added */
    CHECK_EQ(write(p.master, "ab\003", 3), 3); /* ^C is a byte in raw */
    run_until(loop, &k.nread, 3);
    CHECK(memcmp(k.buf, "ab\003", 3) == 0);
    CHECK(k.t.stream.bytes_read >= 3);
    term_close_and_wait(loop, &k);
    finish(loop, &p);
}

/* A tty on stdout (fd 1) of a program whose stdin is the same terminal,
 * as a shell starts it: the handle is for output (modes, size, colours)
 * and reads nothing until asked (lull_endpoint_read_start), as libuv's
 * uv_tty_init on fd 1 never reads before uv_read_start; the keys typed
 * meanwhile stay for stdin's reader. Input is read from the start only on
 * a tty made for another fd. */
static void stdout_tty_body(void *arg) {
    (void)arg;
    pty p = pty_open();
    struct termios quiet = mode_of(p.slave); /* the master reads only "out" */
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &quiet), 0);
    CHECK_EQ(dup2(p.slave, STDOUT_FILENO), STDOUT_FILENO);
    lull_loop *loop = new_loop();
    term k;
    term_init(loop, &k, STDOUT_FILENO);
    CHECK_EQ(write(p.master, "typed\n", 6), 6); /* a line for stdin */
    struct pollfd pfd = {.fd = p.slave, .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 10000), 1); /* it reached the slave */
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "out", 3), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    char buf[16] = {0};
    CHECK_EQ(read_some(p.master, buf, 3), 3);
    CHECK(memcmp(buf, "out", 3) == 0);
    CHECK_EQ(k.nread, 0);
    CHECK_EQ(poll(&pfd, 1, 0), 1); /* the line is still there */
    CHECK_EQ(read(p.slave, buf, sizeof buf), 6);
    CHECK(memcmp(buf, "typed\n", 6) == 0);
    /* Asked, it reads. */
    CHECK_EQ(lull_endpoint_read_start(&k.t.stream.ep), 0);
    CHECK_EQ(write(p.master, "more\n", 5), 5);
    run_until(loop, &k.nread, 5);
    CHECK(memcmp(k.buf, "more\n", 5) == 0);
    term_close_and_wait(loop, &k);
    /* An fd opened write-only: the same. */
    char name[128];
    CHECK_EQ(ptsname_r(p.master, name, sizeof name), 0);
    int wo = open(name, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    CHECK(wo >= 0);
    term_init(loop, &k, wo);
    CHECK_EQ(write(p.master, "again\n", 6), 6);
    CHECK_EQ(poll(&pfd, 1, 10000), 1);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(k.nread, 0);
    CHECK_EQ(read(p.slave, buf, sizeof buf), 6);
    term_close_and_wait(loop, &k);
    close(wo);
    finish(loop, &p);
}

TEST(tty_on_stdout_reads_nothing_until_asked) {
    CHECK(check_exits_cleanly(stdout_tty_body, NULL));
}

/* The caller's fd keeps its flags: the tty opened the terminal anew, and
 * O_NONBLOCK is on lull's description only. */
TEST(caller_fd_stays_blocking) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.slave, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    term k;
    term_init(loop, &k, p.slave);
    CHECK(k.t.stream.ep.on_frame != NULL);
    CHECK(fcntl(lull_stream_fd(&k.t.stream), F_GETFL) & O_NONBLOCK);
    CHECK_EQ(fcntl(p.slave, F_GETFL), fl);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0);
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "x", 1), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fcntl(p.slave, F_GETFL), fl);
    term_close_and_wait(loop, &k);
    CHECK_EQ(fcntl(p.slave, F_GETFL), fl);
    finish(loop, &p);
}

/* A pty's master has no name to open anew (/dev/ptmx would make a new
 * pty): the tty uses the shared description, non-blocking while open,
 * and gives its flags back on close and in lull_tty_reset_mode. */
TEST(master_fd_falls_back_and_gives_flags_back) {
    pty p;
    int fl;
    term k;
    lull_loop *loop = loop_with_master_term(&p, &fl, &k);
    /* Still the same pty: bytes reach the slave. */
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "m", 1), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    struct termios raw = mode_of(p.slave);
    cfmakeraw(&raw);
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &raw), 0);
    char c = 0;
    CHECK_EQ(read_some(p.slave, &c, 1), 1);
    CHECK_EQ(c, 'm');
    lull_tty_reset_mode(); /* a crash path: the flags come back */
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    CHECK(is_raw(p.slave)); /* NORMAL: the mode is not touched */
    CHECK_EQ(fcntl(p.master, F_SETFL, fl | O_NONBLOCK), 0);
    term_close_and_wait(loop, &k);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    finish(loop, &p);
}

/* Two ttys on one shared description with no name (a program's stdin and
 * stdout are one description; a pty master and its dup here): the second
 * found O_NONBLOCK set, by the first tty's stream, and took it for the
 * flags to give back. Closed first to last, the first close made the
 * description blocking under the second tty's live stream, and the last
 * one left it non-blocking for good; lull_tty_reset_mode left it
 * non-blocking too. Every order ends with the caller's flags, and the
 * description stays non-blocking while either tty is open. how: 0 first
 * closed first, 1 second first, 2 lull_tty_reset_mode. */
static void two_ttys_on_one_description(int how) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.master, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    int fd2 = dup(p.master);
    CHECK(fd2 >= 0);
    term a, b;
    term_init(loop, &a, p.master);
    term_init(loop, &b, fd2);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK);
    if (how == 2) {
        lull_tty_reset_mode(); /* a crash path */
        CHECK_EQ(fcntl(p.master, F_GETFL), fl);
        CHECK_EQ(fcntl(p.master, F_SETFL, fl | O_NONBLOCK), 0);
    }
    term *first = how == 1 ? &b : &a, *last = how == 1 ? &a : &b;
    term_close_and_wait(loop, first);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK); /* the other still reads */
    term_close_and_wait(loop, last);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    close(fd2);
    finish(loop, &p);
}

TEST(two_ttys_on_one_description_first_closed_first) {
    two_ttys_on_one_description(0);
}

TEST(two_ttys_on_one_description_second_closed_first) {
    two_ttys_on_one_description(1);
}

TEST(two_ttys_on_one_description_reset_mode) {
    two_ttys_on_one_description(2);
}

/* A second tty on a shared description with no name whose init fails
 * after its entry (its stream refuses the options): its undo gave the
 * description the flags from before the first tty, blocking under the
 * first tty's live stream, whose next write to a reader that does not
 * read then blocked the loop's thread. The first one keeps it
 * non-blocking, and still gives the caller's flags back at its close. */
TEST(failed_second_tty_on_one_description_leaves_it_nonblocking) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.master, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    int fd2 = dup(p.master);
    CHECK(fd2 >= 0);
    term a;
    term_init(loop, &a, p.master);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK);
    int base = open_fds();
    lull_tty b;
    lull_stream_options fds = {.flags = LULL_STREAM_FDS}; /* not a socket */
    CHECK_EQ(lull_tty_init(loop, &b, fd2, &fds), -ENOTSUP);
    lull_stream_options bad = {.flags = 0x80000000u};
    CHECK_EQ(lull_tty_init(loop, &b, fd2, &bad), -EINVAL);
    CHECK_EQ(open_fds(), base);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK); /* a still uses it */
    /* a's stream writes more than the pty holds to a raw slave nobody
     * reads: the loop's thread goes on (the rest waits in a's queue). */
    struct termios raw = mode_of(p.slave);
    cfmakeraw(&raw);
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &raw), 0);
    static char big[1 << 20];
    memset(big, 'x', sizeof big);
    CHECK_EQ(lull_endpoint_send_copy(&a.t.stream.ep, big, sizeof big), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    term_close_and_wait(loop, &a);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    close(fd2);
    finish(loop, &p);
}

/* A tty with no name and a plain stream on one shared description (a
 * program's stdout as a tty, its stdin, the same description, as a
 * stream): the tty's close gave the description its flags from before,
 * blocking, under the stream still open, whose next write to a reader
 * that does not read then blocked the loop's thread. The stream's own
 * close gives them back. */
static void stream_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)ep, (void)b, (void)n;
}

static void stream_closed(lull_endpoint *ep, int reason) {
    (void)reason;
    (*(int *)ep->data)++;
}

TEST(tty_closed_beside_a_stream_on_its_description_leaves_it_nonblocking) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.master, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    term a;
    term_init(loop, &a, p.master);
    lull_stream s;
    int fd2 = dup(p.master);
    CHECK(fd2 >= 0);
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &s, fd2, &raw), 0); /* owns fd2 */
    int closed = 0;
    s.ep.data = &closed;
    lull_endpoint_set_callbacks(&s.ep, stream_frame, NULL, stream_closed);
    term_close_and_wait(loop, &a);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK); /* s still uses it */
    struct termios mode = mode_of(p.slave);
    cfmakeraw(&mode);
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &mode), 0);
    static char big[1 << 20];
    memset(big, 'y', sizeof big);
    CHECK_EQ(lull_endpoint_send_copy(&s.ep, big, sizeof big), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_endpoint_close(&s.ep, 0), 0);
    run_until(loop, &closed, 1);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    finish(loop, &p);
}

/* syscall, wrapped (tests/CMakeLists.txt): while kcmp_signal is set, a
 * kcmp (same_description, which lull_tty_init of a tty with no name makes
 * as it looks at the other ttys' entries of the reset table) raises it
 * first: a signal arriving on the loop's thread at that moment. */
long __real_syscall(long nr, ...);
long __wrap_syscall(long nr, ...);
static volatile sig_atomic_t kcmp_signal;
/* While kcmp_hold is set, a kcmp waits there (kcmp_held says it came):
 * a thread held inside a tty's init as it reads the reset table. */
static _Atomic bool kcmp_hold, kcmp_held;

long __wrap_syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_kcmp && kcmp_signal) {
        int sig = kcmp_signal;
        kcmp_signal = 0;
        raise(sig);
    }
    if (nr == SYS_kcmp && atomic_load(&kcmp_hold)) {
        atomic_store(&kcmp_held, true); /* held until the test lets go */
        while (atomic_load(&kcmp_hold))
            sched_yield();
    }
    return __real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* The crash handler's view: the mode and flags lull_tty_reset_mode left. */
static int handler_slave = -1, handler_master = -1;
static volatile sig_atomic_t handler_ran, handler_raw, handler_flags;

static void reset_in_handler(int signum) {
    (void)signum;
    lull_tty_reset_mode();
    struct termios t;
    handler_raw = tcgetattr(handler_slave, &t) == 0 &&
                  !(t.c_lflag & (ICANON | ECHO | ISIG));
    handler_flags = fcntl(handler_master, F_GETFL);
    handler_ran = 1;
}

/* A crash handler runs lull_tty_reset_mode while the loop's thread, which
 * it interrupted, is in lull_tty_init of a second tty on a pty master
 * another tty holds RAW: the init holds the first tty's entry of the
 * reset table while it asks whether the two share a description. The
 * reset skipped an entry held so, as if a reset were already restoring
 * it, and the program exited with its terminal raw and non-blocking. */
TEST(reset_mode_in_a_handler_while_an_init_reads_the_table) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct termios before = mode_of(p.slave);
    int fl = fcntl(p.master, F_GETFL);
    term a, b;
    term_init(loop, &a, p.master);
    CHECK_EQ(lull_tty_set_mode(&a.t, LULL_TTY_MODE_RAW), 0);
    CHECK(is_raw(p.slave));
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = reset_in_handler;
    CHECK_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    handler_slave = p.slave;
    handler_master = p.master;
    handler_ran = 0;
    int fd2 = dup(p.master);
    CHECK(fd2 >= 0);
    kcmp_signal = SIGUSR1;
    term_init(loop, &b, fd2);
    kcmp_signal = 0;
    CHECK_EQ(sigaction(SIGUSR1, &old, NULL), 0);
    CHECK_EQ(handler_ran, 1);
    CHECK_EQ(handler_raw, 0);    /* the mode given back */
    CHECK_EQ(handler_flags, fl); /* and the flags */
    CHECK(mode_is(p.slave, &before));
    CHECK_EQ(fcntl(p.master, F_SETFL, fl | O_NONBLOCK), 0);
    term_close_and_wait(loop, &b);
    term_close_and_wait(loop, &a);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    close(fd2);
    finish(loop, &p);
}

/* Two loops on two threads, each opening, moding and closing ttys on its
 * own pty over and over (each init reads every entry of the reset table,
 * each close empties one and waits for its readers), while a third thread
 * runs lull_tty_reset_mode without pause, as a crash handler on another
 * thread would. Nothing may wait forever (a reader counted in and never
 * out, an entry emptied under a reset), and each terminal ends in the
 * mode it had: a reset gives back the mode an entry saved, a close the
 * one its init found. */
#define CHURN_ROUNDS 2000

typedef struct churn {
    pty p;
    struct termios before;
    int rounds;
} churn;

static _Atomic bool churn_stop;

static void *churn_ttys(void *arg) {
    churn *c = arg;
    lull_loop *loop = new_loop();
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        term a, b;
        term_init(loop, &a, c->p.slave);
        CHECK_EQ(lull_tty_set_mode(&a.t, i % 2 ? LULL_TTY_MODE_RAW
                                               : LULL_TTY_MODE_IO),
                 0);
        term_init(loop, &b, c->p.slave); /* reads a's entry */
        CHECK_EQ(lull_tty_set_mode(&b.t, LULL_TTY_MODE_RAW), 0);
        if (i % 3 == 0)
            CHECK_EQ(lull_tty_set_mode(&a.t, LULL_TTY_MODE_NORMAL), 0);
        term *first = i % 2 ? &a : &b, *last = i % 2 ? &b : &a;
        term_close_and_wait(loop, first);
        term_close_and_wait(loop, last);
        c->rounds++;
    }
    free_loop(loop);
    return NULL;
}

static void *churn_resets(void *arg) {
    long *n = arg;
    while (!atomic_load(&churn_stop)) {
        lull_tty_reset_mode();
        (*n)++;
    }
    return NULL;
}

TEST_THREADED(ttys_on_two_loops_while_another_thread_resets) {
    churn c[2];
    for (int i = 0; i < 2; i++) {
        c[i].p = pty_open();
        c[i].before = mode_of(c[i].p.slave);
        c[i].rounds = 0;
    }
    atomic_store(&churn_stop, false);
    long resets = 0;
    pthread_t th[3];
    CHECK_EQ(pthread_create(&th[2], NULL, churn_resets, &resets), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, churn_ttys, &c[i]), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    atomic_store(&churn_stop, true);
    CHECK_EQ(pthread_join(th[2], NULL), 0);
    CHECK(resets > 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(c[i].rounds, CHURN_ROUNDS);
        CHECK(mode_is(c[i].p.slave, &c[i].before));
        pty_close(&c[i].p);
    }
}

/* A pty master whose reader stalls, with more queued than the pty holds:
 * the close gives the shared description its blocking flags back, and the
 * stream's last try at the queue must not then block the loop's thread on
 * a reader that never reads. SIGALRM (default: death) fails a hang in 10 s. */
TEST(master_close_with_writes_queued_for_a_stalled_reader) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.master, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    /* Not canonical: a full line buffer there drops input instead of
     * holding the writer back. */
    struct termios raw = mode_of(p.slave);
    cfmakeraw(&raw);
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &raw), 0);
    term k;
    term_init(loop, &k, p.master);
    static char big[256 * 1024];
    memset(big, 'x', sizeof big);
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, big, sizeof big), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    alarm(10);
    term_close_and_wait(loop, &k);
    alarm(0);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    finish(loop, &p);
}

/* ------------------------------------------------------ window size */

static void on_winch(lull_signal *sig, int signum) {
    term *k = sig->data;
    CHECK_EQ(signum, SIGWINCH);
    int cols = 0, rows = 0;
    CHECK_EQ(lull_tty_get_winsize(&k->t, &cols, &rows), 0);
    CHECK_EQ(cols, 132);
    CHECK_EQ(rows, 43);
    k->winches++;
}

/* The size the master set is read back; a resize is SIGWINCH on a
 * lull_signal, whose callback reads the new size. */
TEST(winsize_and_resize_by_sigwinch) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct winsize ws = {.ws_row = 24, .ws_col = 80};
    CHECK_EQ(ioctl(p.master, TIOCSWINSZ, &ws), 0);
    term k;
    term_init(loop, &k, p.slave);
    int cols = 0, rows = 0;
    CHECK_EQ(lull_tty_get_winsize(&k.t, &cols, &rows), 0);
    CHECK_EQ(cols, 80);
    CHECK_EQ(rows, 24);
    lull_signal sig;
    CHECK_EQ(lull_signal_init(loop, &sig, on_winch), 0);
    sig.data = &k;
    CHECK_EQ(lull_signal_start(&sig, SIGWINCH), 0);
    ws.ws_row = 43;
    ws.ws_col = 132;
    CHECK_EQ(ioctl(p.master, TIOCSWINSZ, &ws), 0);
    /* The kernel signals the terminal's foreground group; this pty is no
     * one's controlling terminal, so the case sends it itself. */
    CHECK_EQ(kill(getpid(), SIGWINCH), 0);
    run_until(loop, &k.winches, 1);
    CHECK_EQ(sig.received, 1);
    CHECK_EQ(lull_signal_stop(&sig), 0);
    term_close_and_wait(loop, &k);
    finish(loop, &p);
}

/* ---------------------------------------------------------- hostile */

/* Not a terminal: -ENOTTY (a pipe, /dev/null); a closed fd -EBADF;
 * nothing is left open. */
TEST(not_a_tty) {
    lull_loop *loop = new_loop();
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    int null = open("/dev/null", O_RDWR);
    CHECK(null >= 0);
    int open_before = open_fds();
    lull_tty t;
    CHECK_EQ(lull_tty_init(loop, &t, fds[0], NULL), -ENOTTY);
    CHECK_EQ(lull_tty_init(loop, &t, null, NULL), -ENOTTY);
    CHECK_EQ(lull_tty_init(loop, &t, 1000, NULL), -EBADF);
    CHECK_EQ(open_fds(), open_before);
    CHECK_EQ(fcntl(fds[0], F_GETFL) & O_NONBLOCK, 0);
    close(fds[0]);
    close(fds[1]);
    close(null);
    free_loop(loop);
}

/* NULL and out-of-range arguments are -EINVAL; a closed tty is -EBADF
 * and closes again with 0. */
TEST(tty_argument_errors) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    lull_tty t;
    CHECK_EQ(lull_tty_init(NULL, &t, p.slave, NULL), -EINVAL);
    CHECK_EQ(lull_tty_init(loop, NULL, p.slave, NULL), -EINVAL);
    CHECK_EQ(lull_tty_init(loop, &t, -1, NULL), -EINVAL);
    CHECK_EQ(lull_tty_set_mode(NULL, LULL_TTY_MODE_RAW), -EINVAL);
    CHECK_EQ(lull_tty_get_winsize(NULL, &(int){0}, &(int){0}), -EINVAL);
    CHECK_EQ(lull_tty_close(NULL), -EINVAL);
    term k;
    term_init(loop, &k, p.slave);
    CHECK_EQ(lull_tty_set_mode(&k.t, -1), -EINVAL);
    CHECK_EQ(lull_tty_set_mode(&k.t, 3), -EINVAL);
    CHECK_EQ(lull_tty_get_winsize(&k.t, NULL, &(int){0}), -EINVAL);
    CHECK_EQ(lull_tty_get_winsize(&k.t, &(int){0}, NULL), -EINVAL);
    term_close_and_wait(loop, &k);
    CHECK_EQ(lull_tty_close(&k.t), 0);
    CHECK_EQ(k.closes, 1);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), -EBADF);
    CHECK_EQ(lull_tty_get_winsize(&k.t, &(int){0}, &(int){0}), -EBADF);
    /* Bad stream options: refused, nothing left behind. */
    int open_before = open_fds();
    lull_stream_options bad = {.max_frame = (size_t)UINT32_MAX + 1};
    lull_tty t2;
    int rc = lull_tty_init(loop, &t2, p.slave, &bad);
    if (rc == 0) {
        CHECK_EQ(lull_tty_close(&t2), 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    } else {
        CHECK_EQ(rc, -EINVAL);
    }
    CHECK_EQ(open_fds(), open_before);
    finish(loop, &p);
}

/* lull_tty_init into a tty still open (in RAW): refused, nothing made,
 * and the open tty is as it was: its mode, its stream, its restore. A
 * clearing init would orphan the stream's registered fd, the description
 * and the reset table's entry, and lose the mode to give back. Again
 * after the close, before its on_close ran: refused too. */
TEST(init_into_an_open_tty_is_refused) {
    pty p;
    struct termios before;
    term k;
    lull_loop *loop = loop_with_raw_term(&p, &before, &k);
    int open_before = open_fds();
    CHECK_EQ(lull_tty_init(loop, &k.t, p.slave, NULL), -EBUSY);
    CHECK_EQ(open_fds(), open_before);
    CHECK_EQ(k.t.mode, LULL_TTY_MODE_RAW);
    CHECK(is_raw(p.slave));
    CHECK_EQ(write(p.master, "hi", 2), 2);
    run_until(loop, &k.nread, 2);
    CHECK_EQ(lull_tty_close(&k.t), 0);
    CHECK(mode_is(p.slave, &before));
    CHECK_EQ(lull_tty_init(loop, &k.t, p.slave, NULL), -EBUSY);
    run_until(loop, &k.closes, 1);
    CHECK_EQ(k.closes, 1);
    finish(loop, &p);
}

/* The master goes away under RAW: the stream ends (the terminal hung
 * up: EOF), and the close afterwards, whose restore the dead
 * terminal may refuse, neither crashes nor leaks. */
TEST(hangup_under_raw_mode) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int open_before = open_fds();
    term k;
    term_init(loop, &k, p.slave);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0);
    close(p.master);
    p.master = -1;
    run_until(loop, &k.closes, 1);
    /* A hung-up terminal reads as EOF (Linux's hung_up_tty_read). */
    CHECK(k.reason == 0 || k.reason == -EIO);
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "x", 1), -EPIPE);
    int rc = lull_tty_close(&k.t);
    CHECK(rc == 0 || rc == -EIO);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(k.closes, 1);
    CHECK_EQ(open_fds(), open_before - 1); /* the master, closed above */
    lull_tty_reset_mode(); /* the entry is gone: nothing to touch */
    finish(loop, &p);
}

/* A tty over a pty's master, not reading and waiting for room to write
 * (the slave reads nothing), when the slave closes: the master's hang-up
 * lasts and its writes would say EAGAIN for ever. The write side ends
 * (sends refused) and the loop goes quiet; resumed, the read says -EIO. */
TEST(master_blocked_and_paused_when_the_slave_closes) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct termios raw = mode_of(p.slave);
    cfmakeraw(&raw); /* no echo of what the master writes */
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &raw), 0);
    term k;
    term_init(loop, &k, p.master);
    CHECK_EQ(lull_stream_read_stop(&k.t.stream), 0);
    static char blob[1 << 20];
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, blob, sizeof blob), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(k.t.stream.ep.queued > 0); /* blocked */
    close(p.slave);
    p.slave = -1;
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(k.t.stream.ep.queued, 0);
    CHECK_EQ(lull_endpoint_send_copy(&k.t.stream.ep, "x", 1), -EPIPE);
    CHECK_EQ(k.closes, 0);
    CHECK_EQ(lull_stream_read_start(&k.t.stream), 0);
    run_until(loop, &k.closes, 1);
    CHECK_EQ(k.reason, -EIO);
    CHECK_EQ(lull_tty_close(&k.t), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    finish(loop, &p);
}

/* A close inside the stream's own on_frame: the mode is back at once, the
 * stream's close callback follows in a later turn. */
TEST(close_inside_on_frame) {
    pty p;
    struct termios before;
    term k;
    lull_loop *loop = loop_with_raw_term(&p, &before, &k);
    k.close_in_frame = true;
    CHECK_EQ(write(p.master, "q", 1), 1);
    run_until(loop, &k.closes, 1);
    CHECK_EQ(k.len, 1);
    CHECK(mode_is(p.slave, &before));
    finish(loop, &p);
}

/* Out of fds at each step of the set-up (the reopen, the stream's dup,
 * the stream's buffer): a clean error, nothing left open, no entry left
 * in the reset table (64 ttys still go raw afterwards). */
TEST(tty_init_out_of_fds) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct rlimit saved;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
    int base = open_fds();
    int lowest = dup(0); /* the lowest free fd number */
    CHECK(lowest >= 0);
    close(lowest);
    int fails = 0;
    for (int extra = 0; extra < 4; extra++) {
        struct rlimit rl = saved;
        rl.rlim_cur = (rlim_t)(lowest + extra);
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
        lull_tty t;
        int rc = lull_tty_init(loop, &t, p.master, NULL); /* no name */
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
        if (rc == 0) {
            CHECK_EQ(lull_tty_close(&t), 0);
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
        } else {
            CHECK_EQ(rc, -EMFILE);
            fails++;
        }
        CHECK_EQ(open_fds(), base);
        CHECK_EQ(fcntl(p.master, F_GETFL) & O_NONBLOCK, 0);
    }
    CHECK(fails >= 1);
    enum { N = 64 };
    term *k = calloc(N, sizeof *k);
    CHECK(k != NULL);
    for (int i = 0; i < N; i++) {
        term_init(loop, &k[i], p.slave);
        CHECK_EQ(lull_tty_set_mode(&k[i].t, LULL_TTY_MODE_RAW), 0);
    }
    term_close_all(loop, k, N);
    free(k);
    finish(loop, &p);
}

/* The terminal hangs up and the tty is closed inside the stream's own
 * on_close. */
static void close_tty_in_on_close(lull_endpoint *ep, int reason) {
    term_close(ep, reason);
    term *k = LULL_CONTAINER_OF(ep, term, t.stream.ep);
    int rc = lull_tty_close(&k->t);
    CHECK(rc == 0 || rc == -EIO);
}

TEST(close_inside_on_close_after_hangup) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    term k;
    term_init(loop, &k, p.slave);
    lull_endpoint_set_callbacks(&k.t.stream.ep, term_frame, NULL,
                                close_tty_in_on_close);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), 0);
    close(p.master);
    p.master = -1;
    run_until(loop, &k.closes, 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(k.closes, 1);
    CHECK_EQ(k.t.mode, LULL_TTY_MODE_NORMAL);
    finish(loop, &p);
}

/* A forked child that closes the ttys it inherited (after lull_loop_fork,
 * as it closes inherited streams), or calls lull_tty_reset_mode (at exit,
 * or crashing), must leave the terminal as the parent holds it: the parent's
 * mode, and the shared description's O_NONBLOCK that the parent's stream reads
 * and writes with. The child's close gave the mode from init back and cleared
 * O_NONBLOCK under the parent's feet, so the parent's raw terminal went back to
 * cooked and its loop's next read or write of the pty could block. Both: the
 * slave held RAW, the master (no name: the shared description). */
TEST(close_in_a_forked_child_leaves_the_parents_terminal) {
    pty p;
    struct termios before;
    term k, m;
    lull_loop *loop = loop_with_raw_term(&p, &before, &k);
    term_init(loop, &m, p.master);
    int fl = fcntl(p.master, F_GETFL);
    CHECK(fl & O_NONBLOCK);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        lull_tty_reset_mode(); /* as an atexit or a crash handler would */
        if (lull_loop_fork(loop) != 0) _exit(2);
        if (lull_tty_close(&k.t) != 0 || lull_tty_close(&m.t) != 0) _exit(3);
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(is_raw(p.slave));
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    CHECK_EQ(lull_tty_close(&k.t), 0);
    CHECK_EQ(lull_tty_close(&m.t), 0);
    run_until(loop, &k.closes, 1);
    run_until(loop, &m.closes, 1);
    CHECK(mode_is(p.slave, &before));
    CHECK_EQ(fcntl(p.master, F_GETFL), fl & ~O_NONBLOCK);
    finish(loop, &p);
}

/* A forked child opens a tty of its own on the description its parent's
 * tty k holds non-blocking (a pty's master) and runs `step` on it (a
 * non-zero return: the child's exit status). The child exits 0 when the
 * description is non-blocking still; the parent's k gives the flags from
 * before it back at its close. */
static void childs_tty_beside_the_parents(int (*step)(lull_loop *own,
                                                      term *c)) {
    pty p;
    int fl;
    term k;
    lull_loop *loop = loop_with_master_term(&p, &fl, &k);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        lull_loop *own = NULL;
        if (lull_loop_new(&own, NULL) != 0) _exit(2);
        static term c;
        memset(&c, 0, sizeof c);
        if (lull_tty_init(own, &c.t, p.master, NULL) != 0) _exit(3);
        int rc = step(own, &c);
        if (rc != 0) _exit(rc);
        _exit(fcntl(p.master, F_GETFL) & O_NONBLOCK ? 0 : 6);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK);
    term_close_and_wait(loop, &k);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    finish(loop, &p);
}

/* The child's tty closed, and its close callback run. */
static int close_childs_tty(lull_loop *own, term *c) {
    lull_endpoint_set_callbacks(&c->t.stream.ep, term_frame, NULL, term_close);
    if (lull_tty_close(&c->t) != 0) return 4;
    while (c->closes == 0)
        if (lull_loop_run(own, LULL_RUN_ONCE) != 0) return 5;
    return 0;
}

/* A forked child opens a tty of its own on the description its parent's
 * tty holds non-blocking, and closes it: the parent's stream still needs
 * the flag. The parent's entry in the child's copy of the reset table
 * is the parent's, not the child's to take flags from. */
TEST(tty_of_a_forked_child_on_the_parents_description_leaves_its_flags) {
    childs_tty_beside_the_parents(close_childs_tty);
}

/* A forked child takes a tty it inherited in NORMAL out of NORMAL itself:
 * the mode is the child's to give back, at its lull_tty_reset_mode (a
 * crash) and at its close, as it is for a tty with a name. With no name
 * (a pty master), the tty's entry was the parent's, kept for the shared
 * description's flags, and the child's reset and close skipped it: its
 * crash left the terminal raw under the parent, whose tty holds it in
 * NORMAL. how: 0 reset, 1 close; on the master, or the slave (a name). */
static void child_moded_inherited_tty(int how, bool master) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    struct termios before = mode_of(p.slave);
    int fl = fcntl(p.master, F_GETFL);
    term m;
    term_init(loop, &m, master ? p.master : p.slave);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        if (lull_tty_set_mode(&m.t, LULL_TTY_MODE_RAW) != 0) _exit(3);
        if (!is_raw(p.slave)) _exit(4);
        if (how == 0) lull_tty_reset_mode(); /* its crash handler */
        if (how == 1 && lull_tty_close(&m.t) != 0) _exit(5);
        _exit(mode_is(p.slave, &before) ? 0 : 6);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(mode_is(p.slave, &before));
    if (master) /* the parent's stream reads with it */
        CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK);
    term_close_and_wait(loop, &m);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    finish(loop, &p);
}

TEST(forked_child_moding_an_inherited_tty_resets_it) {
    child_moded_inherited_tty(0, true);
    child_moded_inherited_tty(0, false);
}

TEST(forked_child_moding_an_inherited_tty_closes_it) {
    child_moded_inherited_tty(1, true);
    child_moded_inherited_tty(1, false);
}

/* A thread reading the reset table (a tty's init on a shared description
 * asking kcmp whether another tty's entry is on it) when another thread
 * forks: the child has a copy of the reader's count on that entry and no
 * thread to take it back, so its close of the tty it inherited waited
 * for that reader forever. The child's counts are its own: none at the
 * fork. */
typedef struct held_init {
    int fd;
    int rc;
    lull_loop *loop; /* here, not on the thread's stack: a child forked
                        meanwhile (its own memory checked at its exit, as
                        under valgrind) still reaches it */
} held_init;

static void *init_held_at_kcmp(void *arg) {
    held_init *h = arg;
    lull_loop *loop = h->loop = new_loop();
    term t;
    memset(&t, 0, sizeof t);
    h->rc = lull_tty_init(loop, &t.t, h->fd, NULL);
    if (h->rc == 0) {
        lull_endpoint_set_callbacks(&t.t.stream.ep, term_frame, NULL,
                                    term_close);
        term_close_and_wait(loop, &t);
    }
    free_loop(loop);
    return NULL;
}

TEST_THREADED(close_in_a_child_forked_while_another_thread_reads_the_table) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fl = fcntl(p.master, F_GETFL);
    term m;
    term_init(loop, &m, p.master); /* no name: an entry for its flags */
    held_init h = {.fd = dup(p.master), .rc = 1};
    CHECK(h.fd >= 0);
    atomic_store(&kcmp_held, false);
    atomic_store(&kcmp_hold, true);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, init_held_at_kcmp, &h), 0);
    while (!atomic_load(&kcmp_held))
        sched_yield();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        if (lull_tty_close(&m.t) != 0) _exit(3);
        _exit(0);
    }
    /* The child's close is immediate; 10 s is a hang. */
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < 10000 && got == 0; i++) {
        got = waitpid(pid, &status, WNOHANG);
        if (got == 0) usleep(1000);
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        CHECK_EQ(waitpid(pid, &status, 0), pid);
    }
    atomic_store(&kcmp_hold, false);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(got, pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(h.rc, 0);
    CHECK(fcntl(p.master, F_GETFL) & O_NONBLOCK); /* the parent's, still */
    term_close_and_wait(loop, &m);
    CHECK_EQ(fcntl(p.master, F_GETFL), fl);
    close(h.fd);
    finish(loop, &p);
}

/* A tty closed (its stream's close callback ran) holds nothing, and
 * lull_loop_free accepts its loop. A clean-up after the loop's teardown
 * that closes it again (a wrapper's destructor) or asks its size got the
 * documented answers in release builds, but debug builds read the freed
 * loop's owner for their thread check first (AddressSanitizer: a use
 * after free). The answer comes from the tty alone now. */
TEST(calls_after_close_and_the_loops_free_touch_no_loop) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    term k;
    term_init(loop, &k, p.slave);
    term_close_and_wait(loop, &k);
    free_loop(loop);
    CHECK_EQ(lull_tty_close(&k.t), 0);
    CHECK_EQ(lull_tty_set_mode(&k.t, LULL_TTY_MODE_RAW), -EBADF);
    int cols, rows;
    CHECK_EQ(lull_tty_get_winsize(&k.t, &cols, &rows), -EBADF);
    CHECK_EQ(k.closes, 1);
    pty_close(&p);
}

/* A program that closed its stdin, stdout and stderr, then set up a tty
 * on a terminal it had open elsewhere: lull's description of it (opened
 * by name, or a copy of the fd where it has none) and the stream's fd
 * took 0 and 1, so the program's printf went through lull's stream's fd
 * and a child spawned with its stdio inherited got them. They stay above
 * 2, as the loop's and the sockets' do (test_stream,
 * sockets_never_take_closed_stdio), for a slave (opened anew) and a
 * master (no name: copied). */
static void tty_fds_above_stdio(bool master) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    int fd = master ? p.master : p.slave;
    stdio_gone gone;
    stdio_close(&gone);
    term k;
    memset(&k, 0, sizeof k);
    int rc = lull_tty_init(loop, &k.t, fd, NULL);
    int ctl = k.t.ctl, sfd = rc == 0 ? lull_stream_fd(&k.t.stream) : -1;
    stdio_back(&gone);
    CHECK_EQ(rc, 0);
    lull_endpoint_set_callbacks(&k.t.stream.ep, term_frame, NULL, term_close);
    CHECK(ctl > 2);
    CHECK(sfd > 2);
    CHECK_STDIO_STAYED_CLOSED(&gone);
    term_close_and_wait(loop, &k);
    finish(loop, &p);
}

TEST(tty_fds_of_a_slave_never_take_closed_stdio) {
    tty_fds_above_stdio(false);
}

TEST(tty_fds_of_a_master_never_take_closed_stdio) {
    tty_fds_above_stdio(true);
}

/* A tty on a pty's master (no name: entered in the reset table at init
 * for its flags) closed while NORMAL gives no mode back: a change the
 * program made to the terminal itself meanwhile stays. */
TEST(close_in_normal_mode_keeps_the_programs_own_change) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    term k;
    term_init(loop, &k, p.master);
    struct termios own = mode_of(p.slave);
    own.c_lflag &= ~(tcflag_t)ECHO;
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &own), 0);
    term_close_and_wait(loop, &k);
    CHECK(mode_is(p.slave, &own));
    finish(loop, &p);
}

/* A second tty on a terminal that the first holds only in NORMAL takes
 * the mode the terminal has now as the one to give back, not the first
 * one's from before a change the program made in between: the table's
 * mode is taken only from a tty that has the terminal out of NORMAL. */
TEST(second_tty_saves_the_mode_the_program_set_since_the_first) {
    lull_loop *loop = new_loop();
    pty p = pty_open();
    term a, b;
    term_init(loop, &a, p.master);
    struct termios own = mode_of(p.slave);
    own.c_lflag &= ~(tcflag_t)ECHO;
    CHECK_EQ(tcsetattr(p.slave, TCSANOW, &own), 0);
    term_init(loop, &b, p.master);
    CHECK_EQ(lull_tty_set_mode(&b.t, LULL_TTY_MODE_RAW), 0);
    CHECK(is_raw(p.slave));
    term_close_and_wait(loop, &b);
    CHECK(mode_is(p.slave, &own));
    term_close_and_wait(loop, &a);
    CHECK(mode_is(p.slave, &own));
    finish(loop, &p);
}

/* The child's lull_tty_reset_mode, as its atexit or crash handler runs it. */
static int reset_mode_in_the_child(lull_loop *own, term *c) {
    (void)own, (void)c;
    lull_tty_reset_mode();
    return 0;
}

/* A forked child's tty on the description its parent's tty holds
 * non-blocking, and the child's lull_tty_reset_mode (an atexit or crash
 * handler): the flags it gives back are the description's when the child
 * opened its tty, not the parent's from before lull (the parent's entry
 * is the parent's), so the parent's stream keeps O_NONBLOCK. */
TEST(reset_mode_in_a_forked_childs_tty_leaves_the_parents_flags) {
    childs_tty_beside_the_parents(reset_mode_in_the_child);
}
