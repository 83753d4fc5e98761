/* fs_watch: watches a directory and reports what happens in it, coalesced
 * per name and turn. It makes a scratch directory, writes a file there in
 * a burst, renames it and removes it, and prints each event it sees.
 *
 * Build:
 *   cc -O2 -o fs_watch fs_watch.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* mkdtemp */
#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[64] = "/tmp/fs_watch-XXXXXX";
static int step;

static void in(const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s", dir, name);
}

/* Each step changes the directory once the previous one was seen. */
static void next_step(void) {
    char a[128], b[128];
    in("notes.txt", a, sizeof a);
    in("renamed.txt", b, sizeof b);
    if (step == 0) {
        int fd = open(a, O_WRONLY | O_CREAT, 0644);
        for (int i = 0; i < 1000; i++)
            if (write(fd, "x", 1) != 1) break; /* a burst: one event */
        close(fd);
    } else if (step == 1) {
        rename(a, b);
    } else if (step == 2) {
        unlink(b);
    } else if (step == 3) {
        rmdir(dir); /* the watch ends: GONE */
    }
    step++;
}

static void on_event(lull_fsevent *w, unsigned events, const char *name,
                     const char *other) {
    (void)w;
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
    lull_fsevent w;
    if (!mkdtemp(dir) || lull_loop_new(&loop, NULL) < 0) return 1;
    lull_fsevent_init(loop, &w);
    if (lull_fsevent_start(&w, dir, on_event) < 0) return 1;
    next_step();
    lull_loop_run(loop, LULL_RUN_DEFAULT); /* until the watch is gone */
    printf("fs_watch: %d steps seen\n", step);
    return lull_loop_free(loop) == 0 ? 0 : 1;
}
