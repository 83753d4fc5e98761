/* File-system events (src/fsevent.c) on real directories under a fresh
 * temporary one: a burst of writes to one file is one MODIFIED; 10,000
 * files created in a burst are each reported once, none lost; a rename
 * between two watched directories reaches both with both names, one inside
 * a directory is one callback; a watched file removed, or a watched
 * directory removed or moved, says so; an idle watch makes no wakeup; the
 * watch limit (inotify_add_watch wrapped to fail: tests/CMakeLists.txt)
 * and the kernel's queue overflow (read wrapped) reach the caller; stops
 * inside callbacks; hostile arguments. */
#include "check.h"
#include "stdio_gone.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "polls.h"

/* ------------------------------------------------------------ wrappers */

static int fail_add_watch;   /* errno to fail inotify_add_watch with, or 0 */
static int overflow_fd = -1; /* the next read of this fd reports overflow */

int __real_inotify_add_watch(int fd, const char *path, uint32_t mask);
int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask) {
    if (fail_add_watch) {
        errno = fail_add_watch;
        return -1;
    }
    return __real_inotify_add_watch(fd, path, mask);
}

static bool hide_fdinfo; /* reads of /proc/<pid>/fdinfo/ files say EOF */

/* Whether fd is open on a /proc/<pid>/fdinfo/ file. */
static bool is_fdinfo(int fd) {
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return false;
    target[n] = '\0';
    return strstr(target, "/fdinfo/") != NULL;
}

ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n) {
    if (hide_fdinfo && fd >= 0 && is_fdinfo(fd)) return 0;
    if (fd >= 0 && fd == overflow_fd && n >= sizeof(struct inotify_event)) {
        overflow_fd = -1;
        struct inotify_event ev = {.wd = -1, .mask = IN_Q_OVERFLOW};
        memcpy(buf, &ev, sizeof ev);
        return (ssize_t)sizeof ev;
    }
    return __real_read(fd, buf, n);
}

/* ------------------------------------------------------------- helpers */

static char root[64];

static void make_root(void) {
    snprintf(root, sizeof root, "/tmp/lull-fsevent-XXXXXX");
    CHECK(mkdtemp(root) != NULL);
}

static void remove_tree(const char *dir) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

static const char *at(const char *name) {
    static char paths[4][PATH_MAX];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", root, name);
    return p;
}

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    return loop;
}

/* What a watch saw. */
typedef struct seen {
    int calls;
    unsigned all;      /* every bit seen */
    char names[8][64]; /* the first calls' names */
    char others[8][64];
    unsigned events[8];
    lull_fsevent *stop_other; /* stopped at the first call */
    bool stop_self;
} seen;

static void on_event(lull_fsevent *w, unsigned events, const char *name,
                     const char *other) {
    seen *s = w->data;
    if (s->calls < 8) {
        snprintf(s->names[s->calls], 64, "%s", name ? name : "(self)");
        snprintf(s->others[s->calls], 64, "%s", other ? other : "");
        s->events[s->calls] = events;
    }
    s->calls++;
    s->all |= events;
    if (s->stop_other) lull_fsevent_stop(s->stop_other);
    if (s->stop_self) lull_fsevent_stop(w);
}

static void watch(lull_loop *loop, lull_fsevent *w, seen *s, const char *path) {
    memset(s, 0, sizeof *s);
    w->data = s;
    CHECK_EQ(lull_fsevent_init(loop, w), 0);
    CHECK_EQ(w->data, s);
    CHECK_EQ(lull_fsevent_start(w, path, on_event), 0);
}

/* A new root with directories a and b, a loop, and a watch on each:
 * wa (seen sa) on a, wb (seen sb) on b. */
static lull_loop *root_with_a_and_b_watched(lull_fsevent *wa, seen *sa,
                                            lull_fsevent *wb, seen *sb) {
    make_root();
    CHECK_EQ(mkdir(at("a"), 0755), 0);
    CHECK_EQ(mkdir(at("b"), 0755), 0);
    lull_loop *loop = new_loop();
    watch(loop, wa, sa, at("a"));
    watch(loop, wb, sb, at("b"));
    return loop;
}

/* A case's end: its loop freed, then the root and all below it removed. */
static void free_loop_and_root(lull_loop *loop) {
    CHECK_EQ(lull_loop_free(loop), 0);
    remove_tree(root);
}

static void touch(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    close(fd);
}

/* ---------------------------------------------------------------- cases */

TEST(hostile_arguments) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w, w2;
    seen s;
    CHECK_EQ(lull_fsevent_init(NULL, &w), -EINVAL);
    CHECK_EQ(lull_fsevent_init(loop, NULL), -EINVAL);
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    w.data = &s;
    CHECK_EQ(lull_fsevent_start(NULL, root, on_event), -EINVAL);
    CHECK_EQ(lull_fsevent_start(&w, NULL, on_event), -EINVAL);
    CHECK_EQ(lull_fsevent_start(&w, "", on_event), -EINVAL);
    CHECK_EQ(lull_fsevent_start(&w, root, NULL), -EINVAL);
    CHECK_EQ(lull_fsevent_start(&w, at("missing"), on_event), -ENOENT);
    static char long_path[PATH_MAX + 10];
    memset(long_path, 'a', sizeof long_path - 1);
    CHECK_EQ(lull_fsevent_start(&w, long_path, on_event), -ENAMETOOLONG);
    CHECK_EQ(lull_loop_free(loop), 0); /* failed starts left nothing */
    loop = new_loop();
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    CHECK_EQ(lull_fsevent_start(&w, root, on_event), 0);
    CHECK_EQ(lull_fsevent_start(&w, root, on_event), -EBUSY);
    CHECK_EQ(lull_fsevent_init(loop, &w2), 0);
    CHECK_EQ(lull_fsevent_start(&w2, root, on_event), -EEXIST);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    CHECK_EQ(lull_fsevent_stop(&w), 0); /* idempotent */
    CHECK_EQ(lull_fsevent_stop(&w2), 0);
    CHECK_EQ(lull_fsevent_stop(NULL), -EINVAL);
    free_loop_and_root(loop);
}

/* A watch never set up (all zero, as a static or `= {0}` is): stop and
 * start refuse it, and ref and unref are no-ops, as for the other
 * handles. Its descriptor field reads 0, a valid one, and ref took it for
 * a started watch: a NULL loop dereferenced. */
TEST(zeroed_watch_ref_unref_are_no_ops) {
    lull_fsevent zero = {0};
    CHECK_EQ(lull_fsevent_start(&zero, "/tmp", on_event), -EINVAL);
    CHECK_EQ(lull_fsevent_stop(&zero), -EINVAL);
    lull_fsevent_ref(&zero);
    lull_fsevent_unref(&zero);
    lull_fsevent_ref(&zero);
    lull_fsevent_ref(NULL);
    lull_fsevent_unref(NULL);
    CHECK_EQ(zero.loop, NULL);
}

TEST(burst_of_writes_is_one_modified) {
    make_root();
    touch(at("f"));
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, root);
    int fd = open(at("f"), O_WRONLY);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(write(fd, "x", 1), 1);
    close(fd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(strcmp(s.names[0], "f"), 0);
    CHECK_EQ(s.events[0], LULL_FSEVENT_MODIFIED);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* A program that closed its stdin, stdout and stderr: the loop's inotify
 * instance, made at the first watch, is lull's own fd and stays above 2,
 * as the loop's epoll set and eventfd do (test_process's
 * loop_and_signal_fds_never_take_closed_stdio): at 0 it would be the
 * program's stdin and what a child spawned with stdin inherited gets. */
TEST(inotify_fd_never_takes_a_closed_stdin) {
    make_root();
    lull_loop *loop = new_loop();
    stdio_gone gone;
    stdio_close(&gone);
    lull_fsevent w;
    seen s;
    memset(&s, 0, sizeof s);
    w.data = &s;
    int init = lull_fsevent_init(loop, &w);
    int started = init == 0 ? lull_fsevent_start(&w, root, on_event) : -1;
    stdio_back(&gone);
    CHECK_EQ(init, 0);
    CHECK_EQ(started, 0);
    CHECK_STDIO_STAYED_CLOSED(&gone);
    touch(at("f"));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(s.calls >= 1);
    CHECK_EQ(strcmp(s.names[0], "f"), 0);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* A name removed and made again within one read is two calls, in that
 * order: coalesced into one, DELETED | CREATED says "it came and went"
 * (lull.h) of a file that is there. A rename back and forth is told in
 * order too, so that acting on the calls in turn ends with what is on
 * disk. */
TEST(removed_then_made_again_is_two_calls_in_order) {
    make_root();
    touch(at("f"));
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, root);
    CHECK_EQ(unlink(at("f")), 0);
    touch(at("f"));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.calls, 2);
    CHECK_EQ(strcmp(s.names[0], "f"), 0);
    CHECK_EQ(s.events[0], LULL_FSEVENT_DELETED);
    CHECK_EQ(strcmp(s.names[1], "f"), 0);
    CHECK(s.events[1] & LULL_FSEVENT_CREATED);
    CHECK(!(s.events[1] & LULL_FSEVENT_DELETED));
    /* Renamed away and back: the last call is on f, which is there. */
    memset(&s, 0, sizeof s);
    CHECK_EQ(rename(at("f"), at("g")), 0);
    CHECK_EQ(rename(at("g"), at("f")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(s.calls >= 2 && s.calls <= 8);
    CHECK_EQ(strcmp(s.names[s.calls - 1], "f"), 0);
    CHECK(s.events[s.calls - 1] & LULL_FSEVENT_MOVED_TO);
    CHECK_EQ(strcmp(s.others[s.calls - 1], "g"), 0);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* Counts distinct names. */
static int burst_seen;
static unsigned char burst_names[10000];
static void on_burst(lull_fsevent *w, unsigned events, const char *name,
                     const char *other) {
    (void)w, (void)other;
    CHECK_EQ(events, LULL_FSEVENT_CREATED);
    int i = atoi(name);
    CHECK(i >= 0 && i < 10000);
    CHECK_EQ(burst_names[i], 0);
    burst_names[i] = 1;
    burst_seen++;
}

TEST(ten_thousand_files_created_in_a_burst) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w;
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    CHECK_EQ(lull_fsevent_start(&w, root, on_burst), 0);
    /* mknod: one event a file (open + close would add a second). */
    for (int i = 0; i < 10000; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d", i);
        CHECK_EQ(mknod(at(name), S_IFREG | 0644, 0), 0);
    }
    int runs = 0;
    while (burst_seen < 10000 && runs++ < 1000)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(burst_seen, 10000);
    CHECK(runs > 1); /* read in bounded batches, not in one */
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* Many watches, stopped and started in a scrambled order between rounds
 * of one file made in every directory: each event reaches its own watch
 * (its descriptor looked up in the loop's table as watches come and go),
 * a stopped watch hears nothing. */
#define MANY 200
TEST(many_watches_come_and_go_each_hears_its_own) {
    make_root();
    lull_loop *loop = new_loop();
    static lull_fsevent w[MANY];
    static seen s[MANY];
    static bool on[MANY];
    char name[32];
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "d%d", i);
        CHECK_EQ(mkdir(at(name), 0755), 0);
        watch(loop, &w[i], &s[i], at(name));
        on[i] = true;
    }
    unsigned x = 12345;
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < MANY / 3; k++) {
            x = x * 1103515245u + 12345u;
            int i = (int)((x >> 8) % MANY);
            if (on[i]) {
                CHECK_EQ(lull_fsevent_stop(&w[i]), 0);
            } else {
                snprintf(name, sizeof name, "d%d", i);
                CHECK_EQ(lull_fsevent_start(&w[i], at(name), on_event), 0);
            }
            on[i] = !on[i];
        }
        int want = 0;
        for (int i = 0; i < MANY; i++) {
            s[i].calls = 0;
            snprintf(name, sizeof name, "d%d/r%d", i, round);
            touch(at(name));
            want += on[i];
        }
        int got = 0;
        for (int spins = 0; got < want && spins < 100; spins++) {
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
            got = 0;
            for (int i = 0; i < MANY; i++)
                got += s[i].calls;
        }
        for (int i = 0; i < MANY; i++) {
            CHECK_EQ(s[i].calls, on[i] ? 1 : 0);
            snprintf(name, sizeof name, "r%d", round);
            if (on[i]) CHECK(strcmp(s[i].names[0], name) == 0);
        }
    }
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(lull_fsevent_stop(&w[i]), 0);
    free_loop_and_root(loop);
}

/* The descriptor table's removal: a watch whose descriptor's slot was
 * taken sits in the next one; when the watch in its own slot stops, it
 * must be found from its slot still. Descriptors count up, so restarting
 * one watch walks its descriptor round the 32-slot table onto another's. */
TEST(a_watch_moved_by_a_collision_is_found_after_the_other_stops) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w[10], x;
    seen s[10], sx;
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "d%d", i);
        CHECK_EQ(mkdir(at(name), 0755), 0);
        watch(loop, &w[i], &s[i], at(name));
    }
    CHECK_EQ(mkdir(at("x"), 0755), 0);
    watch(loop, &x, &sx, at("x"));
    int spins = 0;
    while ((x.wd & 31) != (w[9].wd & 31) && spins++ < 64) {
        CHECK_EQ(lull_fsevent_stop(&x), 0);
        CHECK_EQ(lull_fsevent_start(&x, at("x"), on_event), 0);
    }
    CHECK((x.wd & 31) == (w[9].wd & 31));
    CHECK_EQ(lull_fsevent_stop(&w[9]), 0);
    touch(at("x/f"));
    for (int i = 0; i < 100 && sx.calls == 0; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(sx.calls, 1);
    CHECK(strcmp(sx.names[0], "f") == 0);
    CHECK_EQ(lull_fsevent_stop(&x), 0);
    for (int i = 0; i < 9; i++)
        CHECK_EQ(lull_fsevent_stop(&w[i]), 0);
    free_loop_and_root(loop);
}

/* The descriptor table keeps a free slot whatever the number of watches
 * (it grows at half full): with 32 watches, one stopped and another
 * started before the loop reads the stopped one's IN_IGNORED, that late
 * event's descriptor is looked up and not found (an empty slot ends the
 * probe), and the other watches still hear theirs. */
TEST(late_event_of_a_stopped_watch_among_32_is_dropped) {
    make_root();
    lull_loop *loop = new_loop();
    static lull_fsevent w[33];
    static seen s[33];
    char name[32];
    for (int i = 0; i < 32; i++) {
        snprintf(name, sizeof name, "d%d", i);
        CHECK_EQ(mkdir(at(name), 0755), 0);
        watch(loop, &w[i], &s[i], at(name));
    }
    CHECK_EQ(lull_fsevent_stop(&w[0]), 0); /* its IN_IGNORED is queued */
    CHECK_EQ(mkdir(at("late"), 0755), 0);
    watch(loop, &w[32], &s[32], at("late"));
    touch(at("d5/f"));
    for (int i = 0; i < 100 && s[5].calls == 0; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(s[5].calls, 1);
    CHECK(strcmp(s[5].names[0], "f") == 0);
    CHECK_EQ(s[0].calls, 0);
    for (int i = 1; i < 33; i++)
        CHECK_EQ(lull_fsevent_stop(&w[i]), 0);
    free_loop_and_root(loop);
}

TEST(rename_between_two_watched_directories) {
    make_root();
    CHECK_EQ(mkdir(at("a"), 0755), 0);
    CHECK_EQ(mkdir(at("b"), 0755), 0);
    touch(at("a/x"));
    lull_loop *loop = new_loop();
    lull_fsevent wa, wb;
    seen sa, sb;
    watch(loop, &wa, &sa, at("a"));
    watch(loop, &wb, &sb, at("b"));
    CHECK_EQ(rename(at("a/x"), at("b/y")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(sa.calls, 1);
    CHECK_EQ(sa.events[0], LULL_FSEVENT_MOVED_FROM);
    CHECK_EQ(strcmp(sa.names[0], "x"), 0);
    CHECK_EQ(strcmp(sa.others[0], "y"), 0);
    CHECK_EQ(sb.calls, 1);
    CHECK_EQ(sb.events[0], LULL_FSEVENT_MOVED_TO);
    CHECK_EQ(strcmp(sb.names[0], "y"), 0);
    CHECK_EQ(strcmp(sb.others[0], "x"), 0);
    /* Inside one directory: one callback, on the new name. */
    CHECK_EQ(rename(at("b/y"), at("b/z")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(sb.calls, 2);
    CHECK_EQ(sb.events[1], LULL_FSEVENT_MOVED_FROM | LULL_FSEVENT_MOVED_TO);
    CHECK_EQ(strcmp(sb.names[1], "z"), 0);
    CHECK_EQ(strcmp(sb.others[1], "y"), 0);
    /* Out of every watched directory: a MOVED_FROM with no other name. */
    CHECK_EQ(rename(at("b/z"), at("away")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(sb.calls, 3);
    CHECK_EQ(sb.events[2], LULL_FSEVENT_MOVED_FROM);
    CHECK_EQ(strcmp(sb.others[2], ""), 0);
    lull_fsevent_stop(&wa);
    lull_fsevent_stop(&wb);
    free_loop_and_root(loop);
}

TEST(file_removed_under_an_open_watch) {
    make_root();
    touch(at("f"));
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, at("f"));
    CHECK_EQ(unlink(at("f")), 0);
    for (int i = 0; i < 10 && !(s.all & LULL_FSEVENT_GONE); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(s.all & LULL_FSEVENT_GONE);
    CHECK_EQ(strcmp(s.names[s.calls - 1], "(self)"), 0);
    /* The watch ended with it: the loop is free to go. */
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    free_loop_and_root(loop);
}

TEST(watched_directory_moved_then_removed) {
    make_root();
    CHECK_EQ(mkdir(at("d"), 0755), 0);
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, at("d"));
    CHECK_EQ(rename(at("d"), at("e")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.events[0], LULL_FSEVENT_MOVED_SELF);
    touch(at("e/inside")); /* the watch follows the directory */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(strcmp(s.names[1], "inside"), 0);
    CHECK(s.events[1] & LULL_FSEVENT_CREATED);
    CHECK_EQ(unlink(at("e/inside")), 0);
    CHECK_EQ(rmdir(at("e")), 0);
    for (int i = 0; i < 10 && !(s.all & LULL_FSEVENT_GONE); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(s.all & LULL_FSEVENT_GONE);
    int calls = s.calls;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0); /* nothing left */
    CHECK_EQ(s.calls, calls);
    free_loop_and_root(loop);
}

/* One read holding a change of the directory itself, then a file's
 * removal, then the directory's: the file's DELETED is heard, and GONE is
 * the watch's last call. Coalesced into the directory's first entry, GONE
 * ended the watch before the file's entry, which was then dropped. */
TEST(directory_changed_then_removed_reports_its_files_before_gone) {
    make_root();
    CHECK_EQ(mkdir(at("d"), 0755), 0);
    touch(at("d/f"));
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, at("d"));
    CHECK_EQ(chmod(at("d"), 0700), 0);
    CHECK_EQ(unlink(at("d/f")), 0);
    CHECK_EQ(rmdir(at("d")), 0);
    for (int i = 0; i < 10 && !(s.all & LULL_FSEVENT_GONE); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.calls, 3);
    CHECK_EQ(strcmp(s.names[0], "(self)"), 0);
    CHECK_EQ(s.events[0], LULL_FSEVENT_ATTRIB);
    CHECK_EQ(strcmp(s.names[1], "f"), 0);
    CHECK_EQ(s.events[1], LULL_FSEVENT_DELETED);
    CHECK_EQ(strcmp(s.names[2], "(self)"), 0);
    CHECK_EQ(s.events[2], LULL_FSEVENT_GONE);
    free_loop_and_root(loop);
}

static void end_idle(lull_timer *t) {
    (void)t;
}

TEST(idle_watch_makes_no_wakeup) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, root);
    lull_fsevent_unref(&w); /* the run ends with the timer */
    lull_timer t;
    lull_timer_init(loop, &t, end_idle);
    lull_timer_start(&t, LULL_MS(200), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* The timer's, or none where the timer was due before the loop got to
     * its wait (valgrind runs this 20-50 times slower). */
    CHECK_LE(m.wakeups, 1);
    CHECK_U64_EQ(m.wakeups, m.wakeups_timer);
    CHECK_U64_EQ(m.wakeups_io, 0);
    CHECK_EQ(s.calls, 0);
    lull_fsevent_ref(&w);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

TEST(watch_limit_is_reported) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w;
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    fail_add_watch = ENOSPC;
    CHECK_EQ(lull_fsevent_start(&w, root, on_event), -ENOSPC);
    fail_add_watch = 0;
    CHECK(loop->fsevents == NULL); /* its inotify fd closed again */
    free_loop_and_root(loop);
}

/* A watch stopped and started again on another directory inside its own
 * callback: the old directory's entries left in that batch are not
 * delivered (they are not the new path's), and the new directory's
 * changes are. */
static const char *restart_path;

static void on_restart(lull_fsevent *w, unsigned events, const char *name,
                       const char *other) {
    on_event(w, events, name, other);
    if (!restart_path) return;
    CHECK_EQ(lull_fsevent_stop(w), 0);
    CHECK_EQ(lull_fsevent_start(w, restart_path, on_event), 0);
    restart_path = NULL;
}

TEST(watch_restarted_on_another_path_inside_its_callback) {
    make_root();
    CHECK_EQ(mkdir(at("a"), 0755), 0);
    CHECK_EQ(mkdir(at("b"), 0755), 0);
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    memset(&s, 0, sizeof s);
    w.data = &s;
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    CHECK_EQ(lull_fsevent_start(&w, at("a"), on_restart), 0);
    restart_path = at("b");
    touch(at("a/1"));
    touch(at("a/2")); /* same batch: dropped with the old watch */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(strcmp(s.names[0], "1"), 0);
    touch(at("a/3")); /* not watched any more */
    touch(at("b/4"));
    while (s.calls < 2)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(s.calls, 2);
    CHECK_EQ(strcmp(s.names[1], "4"), 0);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    free_loop_and_root(loop);
}

/* RLIMIT_NOFILE lowered to the fds already open: the loop's first watch,
 * which makes its inotify fd, says -EMFILE and leaves nothing behind; with
 * fds again the same watch starts. */
TEST(first_watch_out_of_fds_says_emfile) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    memset(&s, 0, sizeof s);
    w.data = &s;
    CHECK_EQ(lull_fsevent_init(loop, &w), 0);
    struct rlimit old;
    check_fds_exhaust(&old);
    int rc = lull_fsevent_start(&w, root, on_event);
    check_fds_restore(&old);
    CHECK_EQ(rc, -EMFILE);
    CHECK(loop->fsevents == NULL);
    CHECK_EQ(w.wd, -1);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_fsevent_start(&w, root, on_event), 0);
    touch(at("f"));
    while (s.calls == 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(strcmp(s.names[0], "f"), 0);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    free_loop_and_root(loop);
}

TEST(overflow_reaches_every_watch) {
    make_root();
    CHECK_EQ(mkdir(at("a"), 0755), 0);
    lull_loop *loop = new_loop();
    lull_fsevent w1, w2;
    seen s1, s2;
    watch(loop, &w1, &s1, root);
    watch(loop, &w2, &s2, at("a"));
    overflow_fd = ((lull_io *)loop->fsevents)->fd;
    touch(at("poke")); /* makes the fd readable; the read says overflow */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s1.all, LULL_FSEVENT_OVERFLOW);
    CHECK_EQ(s2.all, LULL_FSEVENT_OVERFLOW);
    CHECK_EQ(strcmp(s1.names[0], "(self)"), 0);
    lull_fsevent_stop(&w1);
    lull_fsevent_stop(&w2);
    free_loop_and_root(loop);
}

/* The overflow reaches every watch started when it was read, also when
 * the first one called stops itself (the list shifts under the walk) and
 * when a callback starts a new watch (which lost nothing: no call). */
static lull_fsevent *overflow_start_new;
static const char *overflow_new_path;
static void on_overflow_stop(lull_fsevent *w, unsigned events, const char *name,
                             const char *other) {
    on_event(w, events, name, other);
    if (overflow_start_new) {
        lull_fsevent *n = overflow_start_new;
        overflow_start_new = NULL;
        CHECK_EQ(lull_fsevent_start(n, overflow_new_path, on_event), 0);
    }
}

TEST(overflow_reaches_every_watch_when_one_stops_itself) {
    make_root();
    CHECK_EQ(mkdir(at("a"), 0755), 0);
    CHECK_EQ(mkdir(at("b"), 0755), 0);
    CHECK_EQ(mkdir(at("c"), 0755), 0);
    lull_loop *loop = new_loop();
    lull_fsevent w1, w2, w3, w4;
    seen s1, s2, s3, s4;
    watch(loop, &w1, &s1, at("a"));
    watch(loop, &w2, &s2, at("b"));
    watch(loop, &w3, &s3, root);
    /* Whichever is called first stops itself and starts w4. */
    CHECK_EQ(lull_fsevent_stop(&w1), 0);
    CHECK_EQ(lull_fsevent_stop(&w2), 0);
    CHECK_EQ(lull_fsevent_stop(&w3), 0);
    CHECK_EQ(lull_fsevent_start(&w1, at("a"), on_overflow_stop), 0);
    CHECK_EQ(lull_fsevent_start(&w2, at("b"), on_overflow_stop), 0);
    CHECK_EQ(lull_fsevent_start(&w3, root, on_overflow_stop), 0);
    s1.stop_self = s2.stop_self = s3.stop_self = true;
    memset(&s4, 0, sizeof s4);
    w4.data = &s4;
    CHECK_EQ(lull_fsevent_init(loop, &w4), 0);
    overflow_start_new = &w4;
    overflow_new_path = at("c");
    overflow_fd = ((lull_io *)loop->fsevents)->fd;
    touch(at("poke"));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s1.calls, 1);
    CHECK_EQ(s2.calls, 1);
    CHECK_EQ(s3.calls, 1);
    CHECK_EQ(s1.all | s2.all | s3.all, LULL_FSEVENT_OVERFLOW);
    CHECK_EQ(s4.calls, 0);
    CHECK_EQ(lull_fsevent_stop(&w4), 0);
    free_loop_and_root(loop);
}

/* lull_fsevent_init on a started watch: refused, and the watches started
 * before it still hear their events. A clearing init left the watch in
 * the loop's list with its link cleared, which cut off the watches
 * behind it (started before it) and unbalanced the references. */
TEST(init_of_a_started_watch_is_refused) {
    lull_fsevent wa, wb;
    seen sa, sb;
    lull_loop *loop = root_with_a_and_b_watched(&wa, &sa, &wb, &sb);
    CHECK_EQ(lull_fsevent_init(loop, &wb), -EBUSY);
    CHECK_EQ(wb.data, &sb);
    touch(at("a/1"));
    touch(at("b/1"));
    while (sa.calls < 1 || sb.calls < 1)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(lull_fsevent_stop(&wb), 0);
    CHECK_EQ(lull_fsevent_init(loop, &wb), 0); /* stopped: free again */
    CHECK_EQ(lull_fsevent_stop(&wa), 0);
    CHECK(!lull_loop_alive(loop));
    free_loop_and_root(loop);
}

/* After fork() and lull_loop_fork, the child's watches (the parent's
 * inotify instance, shared through the fork) end with GONE in a later
 * turn, and the child can watch anew; nothing the child does reaches the
 * parent's watches. The shared instance let the child read the parent's
 * events, and a stop in the child removed the parent's watch. */
static lull_fsevent fork_w;
static seen fork_s;

static void fork_child_side(void *arg) {
    lull_loop *loop = arg;
    CHECK_EQ(lull_loop_fork(loop), 0);
    CHECK_EQ(fork_s.calls, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fork_s.calls, 1);
    CHECK_EQ(fork_s.events[0], LULL_FSEVENT_GONE);
    CHECK_EQ(lull_fsevent_stop(&fork_w), 0);
    CHECK(!lull_loop_alive(loop));
    /* A watch of the child's own hears the child's changes. */
    lull_fsevent mine;
    seen ms;
    watch(loop, &mine, &ms, root);
    touch(at("child"));
    while (ms.calls == 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(strcmp(ms.names[0], "child"), 0);
    CHECK_EQ(lull_fsevent_stop(&mine), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(watches_after_fork) {
    make_root();
    lull_loop *loop = new_loop();
    watch(loop, &fork_w, &fork_s, root);
    CHECK(check_exits_cleanly(fork_child_side, loop));
    /* The child's file: the parent's watch heard it too (its own queue). */
    touch(at("parent"));
    bool child = false, parent = false;
    while (!parent) {
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        for (int i = 0; i < fork_s.calls && i < 8; i++) {
            child |= strcmp(fork_s.names[i], "child") == 0;
            parent |= strcmp(fork_s.names[i], "parent") == 0;
        }
    }
    CHECK(child);
    CHECK(!(fork_s.all & LULL_FSEVENT_GONE));
    CHECK_EQ(lull_fsevent_stop(&fork_w), 0);
    free_loop_and_root(loop);
}

/* One batch with events for two watches: the first callback stops the
 * second watch, and then itself (the loop's last): nothing more is
 * called, nothing is touched after (ASan). */
TEST(stops_inside_callbacks) {
    lull_fsevent wa, wb;
    seen sa, sb;
    lull_loop *loop = root_with_a_and_b_watched(&wa, &sa, &wb, &sb);
    sa.stop_other = &wb;
    sb.stop_other = &wa;
    sa.stop_self = sb.stop_self = true;
    touch(at("a/1"));
    touch(at("b/1"));
    touch(at("a/2"));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(sa.calls + sb.calls, 1);
    free_loop_and_root(loop);
}

/* The kernel's own queue overflowing (more events than
 * fs.inotify.max_queued_events before the loop reads): the events read,
 * then the overflow reported, and the fd is quiet again: the loop sleeps
 * after it instead of waking for an overflow nobody takes. */
/* fs.inotify.max_queued_events, or 0 (the case is then skipped, said). */
static long max_queued_events(void) {
    long max = 0;
    FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    if (f) {
        if (fscanf(f, "%ld", &max) != 1) max = 0;
        fclose(f);
    }
    if (max <= 0 || max > 65536) {
        printf("max_queued_events %ld: skipped\n", max);
        return 0;
    }
    return max;
}

/* Fills the kernel's queue past max events: files a and b under root
 * changed in turn (consecutive events differ, so the kernel merges none of
 * them). */
static void overflow_the_queue(long max) {
    touch(at("a"));
    touch(at("b"));
    int fa = open(at("a"), O_WRONLY), fb = open(at("b"), O_WRONLY);
    CHECK(fa >= 0 && fb >= 0);
    for (long i = 0; i <= max; i++)
        CHECK_EQ(pwrite(i % 2 ? fb : fa, "x", 1, 0), 1);
    close(fa);
    close(fb);
}

TEST(real_queue_overflow_leaves_the_loop_quiet) {
    long max = max_queued_events();
    if (!max) return;
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, root);
    overflow_the_queue(max);
    for (int i = 0; i < 10000 && !(s.all & LULL_FSEVENT_OVERFLOW); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(s.all & LULL_FSEVENT_OVERFLOW);
    CHECK(polls_in(loop, 20) < 10);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* A watched file removed while the kernel's queue is full: the kernel
 * ends its watch, but the IN_IGNORED that says so is dropped with the
 * other events the overflow lost. The watch hears that it ended (GONE,
 * with the OVERFLOW, its last call) and no longer keeps the loop alive;
 * the others, started before and after it, hear OVERFLOW alone. Its end
 * lost, it stayed started on a descriptor the kernel had freed: never
 * called again, and a run of the loop never returned. */
#define OVERFLOW_DIRS 40

TEST(watch_ended_inside_a_real_overflow_hears_gone) {
    long max = max_queued_events();
    if (!max) return;
    make_root();
    touch(at("f"));
    lull_loop *loop = new_loop();
    static lull_fsevent dw[OVERFLOW_DIRS];
    static seen ds[OVERFLOW_DIRS];
    lull_fsevent w, wf;
    seen s, sf;
    watch(loop, &w, &s, root);
    for (int i = 0; i < OVERFLOW_DIRS; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%d", i);
        CHECK_EQ(mkdir(at(name), 0755), 0);
        watch(loop, &dw[i], &ds[i], at(name));
        if (i == OVERFLOW_DIRS / 2) watch(loop, &wf, &sf, at("f"));
    }
    overflow_the_queue(max);
    CHECK_EQ(unlink(at("f")), 0); /* its events lost with the rest */
    for (int i = 0; i < 10000 && !(s.all & LULL_FSEVENT_OVERFLOW); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(s.all & LULL_FSEVENT_OVERFLOW);
    CHECK(!(s.all & LULL_FSEVENT_GONE)); /* root's watch lives on */
    for (int i = 0; i < OVERFLOW_DIRS; i++) {
        CHECK_EQ(ds[i].calls, 1);
        CHECK_EQ(ds[i].all, LULL_FSEVENT_OVERFLOW);
        CHECK_EQ(lull_fsevent_stop(&dw[i]), 0);
    }
    CHECK(sf.calls >= 1);
    CHECK_EQ(sf.events[sf.calls - 1],
             LULL_FSEVENT_OVERFLOW | LULL_FSEVENT_GONE);
    CHECK_EQ(wf.wd, -1); /* stopped, as a GONE watch is */
    int calls = sf.calls;
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(sf.calls, calls); /* nothing after GONE */
    free_loop_and_root(loop);
}

/* The same overflow where the inotify fd's fdinfo lists no watch (a /proc
 * that leaves inotify's lines out, played by the wrapped read): no watch
 * is taken for ended, neither the live ones nor the one the kernel
 * ended, which hears OVERFLOW alone and is left to the rescan. Taking an
 * empty list at its word ended every watch at every overflow. */
TEST(overflow_with_no_watch_listed_ends_none) {
    long max = max_queued_events();
    if (!max) return;
    make_root();
    touch(at("f"));
    lull_loop *loop = new_loop();
    lull_fsevent w, wf;
    seen s, sf;
    watch(loop, &w, &s, root);
    watch(loop, &wf, &sf, at("f"));
    overflow_the_queue(max);
    CHECK_EQ(unlink(at("f")), 0);
    hide_fdinfo = true;
    for (int i = 0; i < 10000 && !(s.all & LULL_FSEVENT_OVERFLOW); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    hide_fdinfo = false;
    CHECK(s.all & LULL_FSEVENT_OVERFLOW);
    CHECK(!(s.all & LULL_FSEVENT_GONE));
    CHECK_EQ(sf.all, LULL_FSEVENT_OVERFLOW);
    CHECK(wf.wd >= 0); /* still started: the rescan's to stop */
    CHECK_EQ(lull_fsevent_stop(&wf), 0);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    free_loop_and_root(loop);
}

/* An init for another loop of a watch started on this one is refused too:
 * it cleared the watch under this loop, whose list it cut (wa, started
 * before it, never heard from again) and whose count of references it
 * unbalanced. */
TEST(init_of_a_watch_started_on_another_loop_is_refused) {
    lull_fsevent wa, wb;
    seen sa, sb;
    lull_loop *loop = root_with_a_and_b_watched(&wa, &sa, &wb, &sb);
    lull_loop *other = new_loop();
    CHECK_EQ(lull_fsevent_init(other, &wb), -EBUSY);
    CHECK(wb.loop == loop);
    touch(at("a/1"));
    touch(at("b/1"));
    while (sa.calls < 1 || sb.calls < 1)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(lull_fsevent_stop(&wb), 0);
    CHECK_EQ(lull_fsevent_init(other, &wb), 0); /* stopped: free again */
    CHECK_EQ(lull_fsevent_stop(&wa), 0);
    CHECK_EQ(lull_loop_free(other), 0);
    free_loop_and_root(loop);
}

/* Two renames in one batch, a to b then b to c, inside one directory:
 * each is a callback of its own, on its new name with both bits and its
 * old name, so a program that keeps the directory's names (drop other,
 * add name) ends with c alone. Coalesced, b's call lost its MOVED_FROM
 * (the second rename's match took away the bit the first had given it)
 * and said only that b arrived: a was never dropped. */
TEST(chained_renames_in_one_batch_each_say_what_left) {
    make_root();
    touch(at("a"));
    lull_loop *loop = new_loop();
    lull_fsevent w;
    seen s;
    watch(loop, &w, &s, root);
    CHECK_EQ(rename(at("a"), at("b")), 0);
    CHECK_EQ(rename(at("b"), at("c")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(s.calls, 2);
    const unsigned both = LULL_FSEVENT_MOVED_FROM | LULL_FSEVENT_MOVED_TO;
    CHECK_EQ(strcmp(s.names[0], "b"), 0);
    CHECK_EQ(strcmp(s.others[0], "a"), 0);
    CHECK_EQ(s.events[0], both);
    CHECK_EQ(strcmp(s.names[1], "c"), 0);
    CHECK_EQ(strcmp(s.others[1], "b"), 0);
    CHECK_EQ(s.events[1], both);
    lull_fsevent_stop(&w);
    free_loop_and_root(loop);
}

/* A name moved from a into b and on, in the same batch, back into a:
 * b hears it arrive (from x) and leave (to z) in two calls, each with the
 * other name of its own move. Coalesced, b's one call had both bits and
 * the last move's other name, z, which reads as a rename of z to y
 * inside b. */
TEST(name_moved_through_a_directory_in_one_batch) {
    lull_fsevent wa, wb;
    seen sa, sb;
    lull_loop *loop = root_with_a_and_b_watched(&wa, &sa, &wb, &sb);
    touch(at("a/x"));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    memset(&sa, 0, sizeof sa);
    CHECK_EQ(rename(at("a/x"), at("b/y")), 0);
    CHECK_EQ(rename(at("b/y"), at("a/z")), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(sb.calls, 2);
    CHECK_EQ(strcmp(sb.names[0], "y"), 0);
    CHECK_EQ(sb.events[0], LULL_FSEVENT_MOVED_TO);
    CHECK_EQ(strcmp(sb.others[0], "x"), 0);
    CHECK_EQ(strcmp(sb.names[1], "y"), 0);
    CHECK_EQ(sb.events[1], LULL_FSEVENT_MOVED_FROM);
    CHECK_EQ(strcmp(sb.others[1], "z"), 0);
    CHECK_EQ(sa.calls, 2);
    CHECK_EQ(strcmp(sa.names[0], "x"), 0);
    CHECK_EQ(sa.events[0], LULL_FSEVENT_MOVED_FROM);
    CHECK_EQ(strcmp(sa.others[0], "y"), 0);
    CHECK_EQ(strcmp(sa.names[1], "z"), 0);
    CHECK_EQ(sa.events[1], LULL_FSEVENT_MOVED_TO);
    CHECK_EQ(strcmp(sa.others[1], "y"), 0);
    lull_fsevent_stop(&wa);
    lull_fsevent_stop(&wb);
    free_loop_and_root(loop);
}

/* A watch set up but not started, or stopped, holds nothing, and
 * lull_loop_free accepts its loop. A clean-up after the loop's teardown
 * that stops it again (a wrapper's destructor) got 0 in release builds,
 * but debug builds read the freed loop's owner for their thread check
 * first (AddressSanitizer: a use after free). The answer comes from the
 * watch alone now, before any look at its loop. */
TEST(stop_after_the_loops_free_touches_no_loop) {
    make_root();
    lull_loop *loop = new_loop();
    lull_fsevent w, idle;
    seen s;
    watch(loop, &w, &s, root);
    CHECK_EQ(lull_fsevent_init(loop, &idle), 0);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    free_loop_and_root(loop);
    CHECK_EQ(lull_fsevent_stop(&w), 0);
    CHECK_EQ(lull_fsevent_stop(&idle), 0);
    lull_fsevent_unref(&w);
    lull_fsevent_ref(&w);
    lull_fsevent_unref(&idle);
    CHECK_EQ(s.calls, 0);
}
