/* The `files` scenario's contract between its driver (lab/files.c) and the
 * peers' rows (lab/peers/<peer>_files.c, each compiled only when its
 * library is installed): one row of the pool's round trip runs `want`
 * trips (after `warmup` more) of a FILES_BLOCK pread of fd, each submitted
 * from the row's loop when the previous one's result came back, and
 * records each trip's duration with files_trip. */
#ifndef LAB_FILES_H
#define LAB_FILES_H

#include "lab.h"

#include <stdbool.h>
#include <stdint.h>

extern const lab_scenario lab_files; /* lab/files.c */

#define FILES_BLOCK 4096
#define FILES_SIZE  (1 << 20) /* the file read, in the page cache */

typedef struct files_trips {
    int fd;       /* the file, FILES_SIZE bytes */
    char *block;  /* FILES_BLOCK bytes to read into */
    int want;     /* trips recorded */
    int warmup;   /* trips before them, not recorded */
    uint64_t *ns; /* want durations */
    int n;        /* trips ended, warm-up included */
    uint64_t start;
} files_trips;

/* The offset of the next trip's read: the trips walk through the file. */
static inline uint64_t files_offset(const files_trips *t) {
    return (uint64_t)(t->n % (FILES_SIZE / FILES_BLOCK)) * FILES_BLOCK;
}

/* Ends a trip (result: the read's) and starts the clock of the next one.
 * Returns 0 while more trips are due, 1 when the last has ended, or
 * -EIO when the read did not return the whole block (a negative result:
 * itself). */
int files_trip(files_trips *t, int64_t result);

#ifdef LAB_HAVE_UV
int files_uv_run(files_trips *t); /* lab/peers/uv_files.c */
const char *files_uv_version(void);
#endif

#endif /* LAB_FILES_H */
