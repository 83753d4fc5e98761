/* fs_watch: watches a directory and reports what happens in it, coalesced
 * per name and turn. It makes a scratch directory (in $TMPDIR, else /tmp),
 * writes a file there in a burst, renames it and removes it, and prints
 * each event it sees.
 *
 * Build:
 *   cc -O2 -o fs_watch fs_watch.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* mkdtemp */
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[200]; /* $TMPDIR/fs_watch-XXXXXX */
static int step;
static lull_fsevent w;
static int failed;

static void in(const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s", dir, name);
}

/* Each step changes the directory once the previous one was seen. A step
 * that fails changes nothing, so no event would ever come: it stops the
 * watch instead (then nothing is left and lull_loop_run returns), and
 * removes what the steps made. */
static void next_step(void) {
    char a[256], b[256];
    in("notes.txt", a, sizeof a);
    in("renamed.txt", b, sizeof b);
    int ok = 1;
    if (step == 0) {
        int fd = open(a, O_WRONLY | O_CREAT, 0644);
        ok = fd >= 0;
        for (int i = 0; ok && i < 1000; i++)
            ok = write(fd, "x", 1) == 1; /* a burst: one event */
        if (fd >= 0) close(fd);
    } else if (step == 1) {
        ok = rename(a, b) == 0;
    } else if (step == 2) {
        ok = unlink(b) == 0;
    } else if (step == 3) {
        ok = rmdir(dir) == 0; /* the watch ends: GONE */
    }
    if (!ok) {
        fprintf(stderr, "fs_watch: step %d: %s\n", step, strerror(errno));
        failed = 1;
        lull_fsevent_stop(&w);
        unlink(a);
        unlink(b);
        rmdir(dir);
    }
    step++;
}

static void on_event(lull_fsevent *ev, unsigned events, const char *name,
                     const char *other) {
    (void)ev;
    printf("%-12s", name ? name : "(the directory)");
    if (events & LULL_FSEVENT_CREATED) printf(" created");
    if (events & LULL_FSEVENT_MODIFIED) printf(" modified");
    if (events & LULL_FSEVENT_MOVED_FROM) printf(" moved from %s", other);
    if (events & LULL_FSEVENT_DELETED) printf(" deleted");
    if (events & LULL_FSEVENT_GONE) printf(" gone: the watch ended");
    printf("\n");
    if (!(events & LULL_FSEVENT_GONE)) next_step();
}

int main(void) {
    lull_loop *loop;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    int len = snprintf(dir, sizeof dir, "%s/fs_watch-XXXXXX", tmp);
    if (len >= (int)sizeof dir || !mkdtemp(dir)) {
        fprintf(stderr, "fs_watch: no directory made in %s\n", tmp);
        return 1;
    }
    int rc = lull_loop_new(&loop, NULL);
    if (rc == 0) {
        lull_fsevent_init(loop, &w);
        rc = lull_fsevent_start(&w, dir, on_event);
        if (rc < 0) lull_loop_free(loop);
    }
    if (rc < 0) {
        fprintf(stderr, "fs_watch: %s\n", lull_strerror(rc));
        rmdir(dir);
        return 1;
    }
    next_step();
    /* until the watch is gone, or a step failed and stopped it */
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    if (!failed) printf("fs_watch: %d steps seen\n", step);
    return lull_loop_free(loop) == 0 && rc == 0 && !failed ? 0 : 1;
}
