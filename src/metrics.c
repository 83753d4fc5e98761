/* Metrics (C8): counters, sampled latency histograms, callback names.
 *
 * Owns: the histograms of task wait (post -> run) and callback duration,
 * and the table of callback names. Timing every callback would take two
 * clock reads, more than a whole hop costs, so latency is sampled: each
 * clock read of the slice logic arms a sample, the next lull_task_post is
 * stamped, and that task's wait and run time are recorded when it runs.
 * Loop thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bucket of a value: 16 linear sub-buckets per power of two. Values below
 * 16 get a bucket each. */
static unsigned bucket_of(uint64_t v) {
    if (v < LULL_HIST_SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v); /* >= 4 */
    unsigned shift = msb - 4;                          /* keep 4 bits */
    unsigned sub = (unsigned)(v >> shift) & (LULL_HIST_SUB - 1);
    return (shift + 1) * LULL_HIST_SUB + sub;
}

/* The smallest value a bucket holds, and the next bucket's. */
static uint64_t bucket_low(unsigned b) {
    if (b < LULL_HIST_SUB) return b;
    unsigned shift = b / LULL_HIST_SUB - 1;
    uint64_t sub = b % LULL_HIST_SUB;
    return (LULL_HIST_SUB + sub) << shift;
}

/* A bucket is about to pass UINT32_MAX: halves every bucket, rounding up
 * so that none that held a value becomes empty. A percentile reads only
 * the buckets' proportions, which survive; a wrap to zero would have
 * moved every percentile to the maximum. Rare: 4.3 billion records of
 * one bucket. */
static void halve_buckets(lull_histogram *h) {
    for (unsigned b = 0; b < LULL_HIST_BUCKETS; b++)
        h->buckets[b] = h->buckets[b] / 2 + (h->buckets[b] & 1);
}

void lull_histogram_record(lull_histogram *h, uint64_t value) {
    if (!h) return;
    unsigned b = bucket_of(value);
    if (b >= LULL_HIST_BUCKETS) b = LULL_HIST_BUCKETS - 1;
    if (LULL_UNLIKELY(h->buckets[b] == UINT32_MAX)) halve_buckets(h);
    h->buckets[b]++;
    h->count++;
    /* Saturates: a wrapped sum would make the mean arbitrarily small. */
    if (__builtin_add_overflow(h->sum, value, &h->sum)) h->sum = UINT64_MAX;
    if (value > h->max) h->max = value;
}

/* The values the buckets hold: h->count, unless a full bucket halved them
 * (halve_buckets) or a caller filled them by hand. */
static uint64_t bucket_total(const lull_histogram *h) {
    uint64_t total = 0;
    for (unsigned b = 0; b < LULL_HIST_BUCKETS; b++)
        total += h->buckets[b];
    return total;
}

uint64_t lull_histogram_percentile(const lull_histogram *h, double p) {
    if (!h || h->count == 0) return 0;
    if (!(p > 0)) p = 0; /* NaN too: converting it to a rank is undefined */
    if (p >= 1) return h->max;
    uint64_t total = bucket_total(h);
    if (total == 0) return h->max;
    double exact = p * (double)total;
    uint64_t rank = (uint64_t)exact;
    if ((double)rank < exact || rank == 0) rank++; /* ceiling, at least 1 */
    uint64_t seen = 0;
    for (unsigned b = 0; b < LULL_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= rank) {
            /* The middle of the bucket, never past the largest value. */
            uint64_t lo = bucket_low(b);
            uint64_t hi = b + 1 < LULL_HIST_BUCKETS ? bucket_low(b + 1) : lo;
            uint64_t mid = lo + (hi - lo) / 2;
            return mid < h->max ? mid : h->max;
        }
    }
    return h->max;
}

static void summarize(const lull_histogram *h, lull_latency *out) {
    out->count = h->count;
    out->p50 = lull_histogram_percentile(h, 0.50);
    out->p95 = lull_histogram_percentile(h, 0.95);
    out->p99 = lull_histogram_percentile(h, 0.99);
    out->max = h->max;
}

void lull_loop_metrics(lull_loop *loop, lull_metrics *out) {
    if (!loop || !out) return;
    LULL_ASSERT_LOOP_THREAD(loop); /* the loop writes these as it runs */
    *out = loop->m;
    out->tasks_run = loop->tasks_run - loop->tasks_run_base;
    out->iterations += loop->plain_hops;
    out->polls += loop->plain_hops;
    out->empty_polls += loop->plain_hops;
    summarize(&loop->wait_hist, &out->task_wait);
    summarize(&loop->run_hist, &out->task_run);
    lull__live_count(loop, out);
}

void lull_loop_metrics_reset(lull_loop *loop) {
    if (!loop) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    memset(&loop->m, 0, sizeof loop->m);
    loop->plain_hops = 0;
    memset(&loop->wait_hist, 0, sizeof loop->wait_hist);
    memset(&loop->run_hist, 0, sizeof loop->run_hist);
    /* tasks_run itself never goes back: lull_loop_settle counts through it, and
     * a callback may reset the metrics in the middle of a settle. */
    loop->tasks_run_base = loop->tasks_run;
}

/* Tags the task just posted. The tag lives in the task (cancel clears it),
 * so the loop never holds a pointer to a task that may be freed; a newer
 * sample simply makes an older tag stale. */
void lull__wait_sample_begin(lull_loop *loop, lull__node *n) {
    loop->sample_armed = false;
    if (++loop->sample_seq == 0) loop->sample_seq = 1;
    n->aux = loop->sample_seq;
    loop->sample_posted = lull__clock_real();
}

/* Runs a node with an aux (lull__dispatch_node): a timer's is its heap
 * slot, and it runs untimed; a task's is its sample tag, and its wait and
 * its run are timed if the tag is the newest (its post time is the one
 * kept). The task may be freed or re-posted by its callback: only the
 * clock is read afterwards. */
void lull__dispatch_aux(lull_loop *loop, lull__node *n) {
    if (n->flags & LULL__NODE_TIMER) {
        lull__call_node(loop, n);
        return;
    }
    bool current = n->aux == loop->sample_seq;
    n->aux = 0;
    if (!current) {
        lull__call_node(loop, n);
        return;
    }
    uint64_t t0 = lull__clock_real();
    lull_histogram_record(&loop->wait_hist, t0 - loop->sample_posted);
    lull__call_node(loop, n);
    lull_histogram_record(&loop->run_hist, lull__clock_real() - t0);
}

/* ------------------------------------------------------------- names */

static lull__name *find_name(lull_loop *loop, lull_any_fn fn) {
    for (int i = 0; i < loop->names_len; i++)
        if (loop->names[i].fn == fn) return &loop->names[i];
    return NULL;
}

int lull_loop_name(lull_loop *loop, lull_any_fn fn, const char *name) {
    if (!loop || !fn || !name) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    lull__name *named = find_name(loop, fn);
    if (named) {
        named->name = name;
        return 0;
    }
    if (loop->names_len == loop->names_cap) {
        int cap = loop->names_cap ? loop->names_cap * 2 : 8;
        lull__name *names = realloc(loop->names, (size_t)cap * sizeof *names);
        if (!names) return -ENOMEM;
        loop->names = names;
        loop->names_cap = cap;
    }
    loop->names[loop->names_len].fn = fn;
    loop->names[loop->names_len].name = name;
    loop->names_len++;
    return 0;
}

/* The section the linker fills with every LULL__OWN_NAME of the modules
 * linked in; weak, so a program that links none still links. */
extern const lull__own_name __start_lull_own_names[] __attribute__((weak));
extern const lull__own_name __stop_lull_own_names[] __attribute__((weak));

const lull__own_name *lull__own_name_of(lull_any_fn fn) {
    for (const lull__own_name *o = __start_lull_own_names;
         o && o < __stop_lull_own_names; o++)
        if (o->fn == fn) return o;
    return NULL;
}

const char *lull__name_lookup(lull_loop *loop, lull_any_fn fn) {
    lull__name *named = find_name(loop, fn);
    if (named) return named->name;
    const lull__own_name *own = lull__own_name_of(fn);
    return own ? own->name : NULL;
}

const char *lull__name_of(lull_loop *loop, lull_any_fn fn) {
    const char *name = lull__name_lookup(loop, fn);
    return name || !fn ? name : "(unnamed callback)";
}

void lull__names_free(lull_loop *loop) {
    free(loop->names);
    loop->names = NULL;
    loop->names_len = loop->names_cap = 0;
}
