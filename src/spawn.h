/* What the process module (src/process.c) hands to the code that starts a
 * child (src/spawn.c): everything the child needs, prepared in the parent,
 * so that the child only makes system calls between its birth and exec. */
#ifndef LULL_SPAWN_H
#define LULL_SPAWN_H

#include <stdbool.h>
#include <stdint.h>

#include "lull.h"

typedef struct lull__spawn {
    const char *file;  /* with a '/': run as is; without: looked up in path */
    char *const *argv; /* NULL-terminated */
    char *const *envp; /* NULL-terminated, never NULL */
    const char *path;  /* the PATH to search, never NULL */
    const char *cwd;   /* NULL: stay */
    int stdio[LULL_STDIO_MAX]; /* the fd the child gets as 0, 1, 2 ...: i
                                  itself to keep it (inherit), -1 to close
                                  it */
    int stdio_count;           /* 3 to LULL_STDIO_MAX */
    unsigned flags;            /* LULL_PROCESS_NEW_GROUP, _NEW_SESSION, _SETUID,
                                  _SETGID, _CONTROLLING_TTY */
    uint32_t uid, gid;         /* SETUID, SETGID */
    const uint32_t *groups; /* setgroups(group_count, groups) if set_groups */
    int group_count;
    bool set_groups;            /* else, with SETUID or SETGID, setgroups(0)
                                   where permitted */
    const lull_rlimit *rlimits; /* rlimit_count of them, in the parent's
                                   memory (read only) */
    int rlimit_count;
    int err_fd; /* write end of a close-on-exec pipe: a failure before
                   or at exec writes its errno (an int) here */
    volatile int *ran_shared; /* the child sets it to 1 first thing: it
                                 runs in the parent's memory (CLONE_VM held,
                                 and so CLONE_VFORK) */
    int fd_limit;             /* fds to mark close-on-exec by hand where
                                 close_range(CLOSE_RANGE_CLOEXEC) is missing */
} lull__spawn;

/* Starts the child: it sets itself up as sp says and execs, or writes an
 * errno to sp->err_fd and exits with 127. Returns the child's pid, with
 * its pidfd (close-on-exec) in *pidfd, once the child has exec'd or
 * exited if *sp->ran_shared reads 1 then (else at once: the clone was run
 * as a fork, as valgrind does); or a negative errno (-EMFILE, -EAGAIN,
 * -ENOMEM ...) and no child. With SETUID or SETGID, the parent's dumpable
 * flag is as it was when this returns, unless the parent's own ids changed
 * meanwhile (src/spawn.c says why), and such calls run one at a time.
 * The child sends no signal when it ends (exit signal 0). */
int lull__spawn_child(const lull__spawn *sp, int *pidfd);

#endif
