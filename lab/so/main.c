/* lull-lab-so: lull's `turns` entries (lab/turns_lull.c, compiled again)
 * linked against liblull.so instead of the static library, so lull-lab can
 * show whether the way lull is linked matters beside peers that are shared
 * libraries (lab/turns_lull_so.c runs this program).
 *
 *   lull-lab-so FIGURE LABEL   (FIGURE: a TURNS_* number; LABEL: the entry)
 *
 * Reads one turns_params from stdin and writes the entry's return code and
 * turns_result to stdout, raw: both ends are built from the same sources in
 * the same build, so the layouts match. Not a tool of its own. */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_all(int fd, void *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, (char *)buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -EPROTO;
        got += (size_t)r;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "lull-lab-so: run by lull-lab, not by hand\n");
        return 2;
    }
    int figure = atoi(argv[1]);
    const turns_entry *entry = NULL;
    for (int i = 0; i < turns_lull.count; i++)
        if (turns_lull.entries[i].figure == figure &&
            strcmp(turns_lull.entries[i].label, argv[2]) == 0)
            entry = &turns_lull.entries[i];
    turns_params p;
    if (!entry || read_all(STDIN_FILENO, &p, sizeof p) < 0) return 2;
    turns_result res;
    turns_result_clear(&res);
    int rc = entry->fn(&p, &res);
    if (write(STDOUT_FILENO, &rc, sizeof rc) != (ssize_t)sizeof rc ||
        write(STDOUT_FILENO, &res, sizeof res) != (ssize_t)sizeof res)
        return 1;
    return 0;
}
