/* Helpers every implementation of the `turns` figures shares (declared in
 * lab/turns.h): latency summaries, silent sockets, random deadlines, the
 * timers figure's rounds and the round-trip harness. Also linked into
 * lull-lab-so (lab/so/main.c), so nothing here may refer to the driver or
 * to a peer. */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

void turns_result_clear(turns_result *out) {
    for (int i = 0; i < TURNS_VALUES; i++)
        out->v[i] = NAN;
}

/* ------------------------------------------------------------- chains */

void turns_chain_begin(turns_chain_clock *c) {
    c->polls0 = turns_polls();
    c->t0 = lab_now_ns();
}

void turns_chain_end(const turns_chain_clock *c, const turns_params *p,
                     turns_result *out) {
    uint64_t t1 = lab_now_ns();
    out->v[CHAIN_NS_PER_HOP] = (double)(t1 - c->t0) / (double)p->hops;
    out->v[CHAIN_POLLS_PER_HOP] =
        (double)(turns_polls() - c->polls0) / (double)p->hops;
}

/* ----------------------------------------------------------- lateness */

#define MS 1000000ull

int turns_late_open(turns_late *l, const turns_params *p) {
    l->n = 0;
    l->want = p->lateness_samples;
    l->samples = calloc((size_t)l->want, sizeof *l->samples);
    return l->samples ? 0 : -ENOMEM;
}

void turns_late_arm(turns_late *l) {
    l->due = lab_now_ns() + MS;
}

bool turns_late_fired(turns_late *l) {
    uint64_t now = lab_now_ns();
    l->samples[l->n++] = (double)(int64_t)(now - l->due); /* < 0: early */
    if (l->n >= l->want) return false;
    turns_late_arm(l);
    return true;
}

int turns_late_close(turns_late *l, int rc, turns_result *out) {
    if (rc == 0 && l->n > 0) {
        double *v = l->samples;
        int n = l->n;
        out->v[LATE_P50_US] = lab_percentile(v, (size_t)n, 0.50) / 1e3;
        out->v[LATE_P99_US] = lab_percentile(v, (size_t)n, 0.99) / 1e3;
        out->v[LATE_MAX_US] = v[n - 1] / 1e3; /* sorted above */
        out->v[LATE_MIN_US] = v[0] / 1e3;
    }
    free(l->samples);
    l->samples = NULL;
    return rc;
}

/* --------------------------------------------------------------- idle */

void turns_idle_begin(turns_idle_clock *c) {
    c->cpu0 = lab_thread_cpu_ns();
    c->cs0 = lab_thread_nvcsw();
}

uint64_t turns_idle_delay_ns(uint64_t *seed) {
    return turns_random_delay(seed, 3600 * 1000000000ull, 7200 * 1000000000ull);
}

void turns_idle_end(const turns_idle_clock *c, const turns_params *p,
                    turns_result *out) {
    uint64_t cpu1 = lab_thread_cpu_ns(), cs1 = lab_thread_nvcsw();
    double cpu_us = (double)(cpu1 - c->cpu0) / 1e3;
    out->v[IDLE_NVCSW] = (double)(cs1 - c->cs0);
    out->v[IDLE_CPU_US] = cpu_us;
    out->v[IDLE_CPU_US_PER_S] = cpu_us / ((double)p->idle_window_ns / 1e9);
}

/* --------------------------------------------------------- round trip */

int turns_trip_open(turns_trip_clock *t, const turns_params *p) {
    t->p = p;
    t->done = 0;
    t->sent = 0;
    t->samples = calloc((size_t)p->trips, sizeof *t->samples);
    return t->samples ? 0 : -ENOMEM;
}

void turns_trip_send(turns_trip_clock *t) {
    t->sent = lab_now_ns();
}

bool turns_trip_arrived(turns_trip_clock *t) {
    uint64_t now = lab_now_ns();
    int k = t->done++ - t->p->warmup_trips;
    if (k >= 0) t->samples[k] = (double)(now - t->sent);
    if (t->done >= t->p->warmup_trips + t->p->trips) return false;
    turns_trip_send(t);
    return true;
}

int turns_trip_close(turns_trip_clock *t, int rc, turns_result *out) {
    if (rc == 0) turns_trip_us(t->samples, t->p->trips, out);
    free(t->samples);
    t->samples = NULL;
    return rc;
}

void turns_trip_us(double *samples_ns, int n, turns_result *out) {
    if (n <= 0) return;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += samples_ns[i];
    out->v[TRIP_P50_US] = lab_percentile(samples_ns, (size_t)n, 0.50) / 1e3;
    out->v[TRIP_P99_US] = lab_percentile(samples_ns, (size_t)n, 0.99) / 1e3;
    out->v[TRIP_MEAN_US] = sum / n / 1e3;
}

int turns_open_sockets(int *fds, int n) {
    for (int i = 0; i < n; i += 2) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                       sv) != 0) {
            int e = errno;
            turns_close_sockets(fds, i);
            return -e;
        }
        fds[i] = sv[0];
        if (i + 1 < n) {
            fds[i + 1] = sv[1];
        } else {
            close(sv[1]); /* odd n: keep one end, still never readable */
        }
    }
    return 0;
}

void turns_close_sockets(int *fds, int n) {
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

uint64_t turns_random_delay(uint64_t *state, uint64_t lo_ns, uint64_t hi_ns) {
    return lo_ns + lab_rand(state) % (hi_ns - lo_ns);
}

/* ------------------------------------------------------------- timers */

static uint64_t minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_minflt : 0;
}

/* The fault count is read outside the timed span: getrusage is a system
 * call. */
void turns_timer_arms(turns_timer_rounds *tr) {
    if (tr->r >= TURNS_TIMER_ROUNDS) return;
    tr->faults0 = minor_faults();
    tr->t[tr->r][0] = lab_now_ns();
}

void turns_timer_cancels(turns_timer_rounds *tr) {
    if (tr->r >= TURNS_TIMER_ROUNDS) return;
    tr->t[tr->r][1] = lab_now_ns();
}

void turns_timer_done(turns_timer_rounds *tr) {
    if (tr->r >= TURNS_TIMER_ROUNDS) return;
    tr->t[tr->r][2] = lab_now_ns();
    tr->faults[tr->r] = minor_faults() - tr->faults0;
    tr->r++;
}

void turns_timer_figures(turns_result *out, const turns_timer_rounds *tr,
                         size_t armed, size_t pairs, double heap_growth) {
    if (tr->r < 2) return;
    double per = (double)pairs;
    /* The steady state: the round with the median arm + cancel among
     * rounds 1.., its arm and cancel halves with it. */
    int order[TURNS_TIMER_ROUNDS], n = 0;
    for (int r = 1; r < tr->r; r++) {
        int k = n++;
        uint64_t span = tr->t[r][2] - tr->t[r][0];
        while (k > 0 &&
               tr->t[order[k - 1]][2] - tr->t[order[k - 1]][0] > span) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = r;
    }
    int m = order[(n - 1) / 2];
    out->v[TIMERS_STEADY_NS] = (double)(tr->t[m][2] - tr->t[m][0]) / per;
    out->v[TIMERS_ARM_NS] = (double)(tr->t[m][1] - tr->t[m][0]) / per;
    out->v[TIMERS_CANCEL_NS] = (double)(tr->t[m][2] - tr->t[m][1]) / per;
    out->v[TIMERS_FIRST_NS] = (double)(tr->t[0][2] - tr->t[0][0]) / per;
    out->v[TIMERS_FIRST_FAULTS] = (double)tr->faults[0];
    out->v[TIMERS_BYTES] = heap_growth / (double)armed;
}

/* --------------------------------------------------------- round trip */

/* One pair runs at a time (the driver is single threaded), so the barrier
 * can be a file-level object. */
static pthread_barrier_t pair_barrier;

typedef struct pair_side {
    void *(*fn)(void *);
    void *arg;
    int cpu;
    int pin_rc;
} pair_side;

static void *pair_thread(void *arg) {
    pair_side *s = arg;
    s->pin_rc = lab_pin_cpu(s->cpu);
    return s->fn(s->arg);
}

void turns_pair_ready(void) {
    pthread_barrier_wait(&pair_barrier);
}

int turns_pair_run(const turns_params *p, void *(*a)(void *),
                   void *(*b)(void *), void *arg) {
    pair_side sa = {a, arg, p->cpu, 0}, sb = {b, arg, p->cpu_b, 0};
    pthread_t ta, tb;
    pthread_barrier_init(&pair_barrier, NULL, 2);
    int rc = pthread_create(&tb, NULL, pair_thread, &sb);
    if (rc != 0) {
        pthread_barrier_destroy(&pair_barrier);
        return -rc;
    }
    rc = pthread_create(&ta, NULL, pair_thread, &sa);
    if (rc != 0) {
        /* b waits at the barrier forever otherwise: it is cancelled. */
        pthread_cancel(tb);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&pair_barrier);
        return -rc;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&pair_barrier);
    if (sa.pin_rc < 0) return sa.pin_rc;
    return sb.pin_rc;
}
