/* The soak's hooks into the scenarios (lab/soak.c drives them): each runs
 * its scenario's lull implementation once at sizes drawn from *seed, with
 * every delivered event or frame checked on receipt by sequence number and
 * checksum. The timed benchmark paths do not pay for it: the checks are
 * separate callbacks chosen when a run is opened in verify mode.
 *
 * Each returns 0 when everything arrived once, in order and intact, with
 * out->verified the events or frames checked; -EPROTO with out->why set
 * when one was lost, repeated, out of order or corrupt; or another negative
 * errno when the run could not be set up (out->why may say more); or
 * LAB_SOAK_SKIPPED, with out->why, when the scenario cannot run here (no
 * lull-kv built): the soak drops it with one line and goes on. out->sizes
 * says what was drawn.
 *
 * A hook may keep state across runs (serve keeps one lull-kv for the whole
 * soak); its end hook, called once when the soak stops whatever the
 * outcome, releases it and returns 0 or -EPROTO with out->why.
 */
#ifndef LAB_SOAK_H
#define LAB_SOAK_H

#include <stdint.h>

#define LAB_SOAK_SKIPPED 1

typedef struct lab_soak_result {
    uint64_t verified; /* events (pump), frames or replies checked */
    char sizes[160];   /* the sizes and modes drawn, for the report */
    char why[256];     /* on -EPROTO: the first thing found wrong */
} lab_soak_result;

int lab_pump_soak(uint64_t *seed, lab_soak_result *out); /* pump.c */
int lab_loopback_soak(uint64_t *seed,
                      lab_soak_result *out); /* loopback_lull.c */
int lab_replicate_soak(uint64_t *seed, lab_soak_result *out); /* replicate.c */
/* serve.c: one lull-kv for the whole soak, its fds compared from the first
 * run to the end hook, which stops it. */
int lab_serve_soak(uint64_t *seed, lab_soak_result *out);
int lab_serve_soak_end(lab_soak_result *out);

/* `lull-lab soak ...` (lab/soak.c): argv[0] is "soak". Returns the exit
 * status: 0, 1 when the soak failed, 2 for a usage error. */
int lab_soak_main(int argc, char **argv);

#endif /* LAB_SOAK_H */
