/* tty_raw: the terminal in raw mode. Each key is reported as it is typed
 * (no Enter needed, ^C is a key too), a window resize prints the new size,
 * 'q' quits; the terminal's mode comes back on the way out, also when the
 * program dies of a fatal signal.
 *
 * Run it in a terminal, or with --self-test (what the test suite does, and
 * what it does when stdin is not a terminal): it then makes a pty, plays
 * the user on its master side, and checks that the mode came back.
 *
 * Build:
 *   cc -O2 -o tty_raw tty_raw.c $(pkg-config --cflags --libs lull)
 */
#define _GNU_SOURCE /* posix_openpt, ptsname_r */
#include <fcntl.h>
#include <lull.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

typedef struct app {
    lull_tty tty;
    lull_signal winch; /* SIGWINCH: the window changed size */
    int keys;
    int cols, rows;
    int user; /* --self-test: the pty's master side, the "user"; else -1 */
} app;

static void say(app *a, const char *text) {
    lull_endpoint_send_copy(&a->tty.stream.ep, text, strlen(text));
}

static void on_key(lull_endpoint *ep, const void *bytes, size_t len) {
    app *a = LULL_CONTAINER_OF(ep, app, tty.stream.ep);
    const unsigned char *b = bytes;
    for (size_t i = 0; i < len; i++) {
        if (b[i] == 'q') {
            /* Stop what keeps the loop running; the close gives the mode
             * back at once. */
            lull_signal_stop(&a->winch);
            lull_tty_close(&a->tty);
            return;
        }
        char line[32];
        snprintf(line, sizeof line, "key 0x%02x\n", b[i]); /* RAW: "\r\n" */
        say(a, line);
        a->keys++;
    }
}

static void on_winch(lull_signal *sig, int signum) {
    (void)signum;
    app *a = sig->data;
    if (lull_tty_get_winsize(&a->tty, &a->cols, &a->rows) < 0) return;
    char line[48];
    snprintf(line, sizeof line, "size %dx%d\n", a->cols, a->rows);
    say(a, line);
    if (a->user >= 0) (void)!write(a->user, "q", 1); /* the user is done */
}

/* A crash must not leave the shell's terminal raw: give the mode back,
 * then die of the signal as the program would have. */
static void on_fatal(int signum) {
    lull_tty_reset_mode();
    signal(signum, SIG_DFL);
    raise(signum);
}

static int run(int fd, int user) {
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return 1;
    app a = {.user = user};
    int rc = lull_tty_init(loop, &a.tty, fd, NULL);
    if (rc < 0) {
        fprintf(stderr, "tty_raw: %s\n", lull_strerror(rc));
        lull_loop_free(loop);
        return 1;
    }
    lull_endpoint_set_callbacks(&a.tty.stream.ep, on_key, NULL, NULL);
    atexit(lull_tty_reset_mode); /* exit() anywhere, too */
    int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        signal(fatal[i], on_fatal);
    lull_tty_set_mode(&a.tty, LULL_TTY_MODE_RAW);
    /* Resizes: SIGWINCH through a signal handle, read on the loop. */
    lull_signal_init(loop, &a.winch, on_winch);
    a.winch.data = &a;
    lull_signal_start(&a.winch, SIGWINCH);
    lull_tty_get_winsize(&a.tty, &a.cols, &a.rows);
    say(&a, "type keys, resize the window, q quits\n");
    if (user >= 0) {
        /* The user types two keys and resizes the window. */
        struct winsize ws = {.ws_col = 100, .ws_row = 30};
        (void)!write(user, "h\003", 2);
        ioctl(user, TIOCSWINSZ, &ws);
        kill(getpid(), SIGWINCH); /* the kernel sends it only to a
                                     terminal's foreground group */
    }
    lull_loop_run(loop, LULL_RUN_DEFAULT);
    printf("tty_raw: %d keys, last size %dx%d\n", a.keys, a.cols, a.rows);
    return lull_loop_free(loop) == 0 ? 0 : 1;
}

static int self_test(void) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    char name[64];
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
        ptsname_r(master, name, sizeof name) != 0) {
        perror("tty_raw: a pseudo-terminal for the self-test");
        if (master >= 0) close(master);
        return 1;
    }
    int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    struct termios before, after;
    if (slave < 0 || tcgetattr(slave, &before) < 0) {
        perror(name);
        if (slave >= 0) close(slave);
        close(master);
        return 1;
    }
    int rc = run(slave, master);
    if (tcgetattr(slave, &after) < 0) return 1;
    bool same = before.c_lflag == after.c_lflag &&
                before.c_iflag == after.c_iflag &&
                before.c_oflag == after.c_oflag;
    printf("tty_raw: mode restored: %s\n", same ? "yes" : "no");
    close(slave);
    close(master);
    return rc == 0 && same ? 0 : 1;
}

int main(int argc, char **argv) {
    bool testing = argc == 2 && strcmp(argv[1], "--self-test") == 0;
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2
     * (ignored, a word put the terminal in raw mode all the same). */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || (argc > 1 && !testing)) {
        fprintf(help ? stdout : stderr, "usage: tty_raw [--self-test]\n");
        return help ? 0 : 2;
    }
    /* Before any thread: every thread must block a watched signal. */
    lull_signal_block(SIGWINCH);
    if (testing || !isatty(0)) return self_test();
    return run(0, -1);
}
