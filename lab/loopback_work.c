/* What every implementation of the `loopback` scenario shares (declared
 * in lab/loopback.h): the workload (a server that applies each COMMIT,
 * then refreshes in a zero-delay step of its own, and the frames it
 * expects), and the peers' minimal loopback over their own turns. It
 * calls no other file of the scenario: the driver (lab/loopback.c), lull's
 * rows (lab/loopback_lull.c), Node's (lab/loopback_node.c) and the C
 * peers' (lab/peers/<peer>_loopback.c) call it. One thread. */
#include "lab.h"
#include "loopback.h"
#include "turns.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ the workload */

enum { MSG_COMMIT = 1, MSG_ACK = 2, MSG_UPDATE = 3 };

typedef struct lb_msg { /* 16 bytes on the wire */
    uint32_t type;
    uint32_t key;
    uint64_t value;
} lb_msg;

#define MAX_DIRTY (2 * (LB_MAX_EFFECTS + 1))

void lb_work_init(lb_work *w, const lb_link_ops *ops, int workload,
                  const lb_params *p) {
    w->ops = ops;
    w->workload = workload;
    w->commits = p->commits;
    w->effects = p->effects < LB_MAX_EFFECTS ? p->effects : LB_MAX_EFFECTS;
    w->rounds = p->graph_rounds;
    memset(w->store, 0, sizeof w->store);
    w->ndirty = 0;
    w->acked = 0;
    w->round = 0;
    w->value = 0;
    w->done = false;
    w->frames = 0;
    w->refreshes = 0;
}

static void send_msg(lb_work *w, int side, uint32_t type, uint32_t key,
                     uint64_t value) {
    lb_msg m = {type, key, value};
    w->ops->send(w, side, &m, sizeof m);
}

void lb_work_start(lb_work *w) {
    send_msg(w, 0, MSG_COMMIT, 0, ++w->value);
}

void lb_work_frame(lb_work *w, int side, const void *bytes, size_t len) {
    lb_msg m;
    if (len != sizeof m) return; /* never sent: the count will not match */
    memcpy(&m, bytes, sizeof m);
    w->frames++;
    if (side == 1) {
        /* The server applies the commit now and answers in its refresh
         * step, a turn of its own. */
        if (m.type != MSG_COMMIT || m.key > (uint32_t)w->effects ||
            w->ndirty == MAX_DIRTY)
            return;
        w->store[m.key] = m.value;
        w->dirty[w->ndirty++] = (int)m.key;
        w->ops->refresh(w);
        return;
    }
    if (m.type == MSG_UPDATE) {
        /* Effect m.key recomputes from its input and writes its key. */
        send_msg(w, 0, MSG_COMMIT, m.key, m.value * 3 + m.key);
    } else if (m.type == MSG_ACK) {
        w->acked++;
        if (w->workload == LB_COMMITS) {
            if (w->acked < w->commits) {
                send_msg(w, 0, MSG_COMMIT, 0, ++w->value);
            } else {
                w->done = true;
            }
        } else if (w->acked == w->effects + 1) {
            /* Every commit of the round came back: each effect ran. */
            w->acked = 0;
            if (++w->round < w->rounds) {
                send_msg(w, 0, MSG_COMMIT, 0, ++w->value);
            } else {
                w->done = true;
            }
        }
    }
}

void lb_work_refresh(lb_work *w) {
    w->refreshes++;
    for (int i = 0; i < w->ndirty; i++) {
        int k = w->dirty[i];
        send_msg(w, 1, MSG_ACK, (uint32_t)k, w->store[k]);
        if (w->workload != LB_GRAPH) continue;
        /* Effects 2k and 2k + 1 read key k (effect 0 does not exist). */
        for (int e = 2 * k; e <= 2 * k + 1; e++)
            if (e >= 1 && e <= w->effects)
                send_msg(w, 1, MSG_UPDATE, (uint32_t)e, w->store[k]);
    }
    w->ndirty = 0;
}

uint64_t lb_work_expected_frames(int workload, const lb_params *p) {
    if (workload == LB_COMMITS) return 2 * (uint64_t)p->commits;
    /* Per round: effects + 1 commits, as many ACKs, an UPDATE per effect. */
    return (uint64_t)p->graph_rounds * (3 * (uint64_t)p->effects + 2);
}

/* ------------------------------- the peers' loopback, over their turns */

/* The same delivery model as lull's pair, kept as small as it can be so
 * that the row measures the peer's turn: caller-owned frames from a pool
 * (no allocation per frame), one inbox per side, one frame per turn. */
#define POOL 256

typedef struct pframe {
    struct pframe *next;
    size_t len;
    unsigned char bytes[sizeof(lb_msg)];
} pframe;

typedef struct plink {
    lb_work w;
    const lb_loop *loop;
    lb_turn *deliver[2]; /* by receiving side */
    lb_turn *refresh;
    pframe *head[2], *tail[2];
    pframe *free;
    int error;
    pframe pool[POOL];
} plink;

static void turn_claim(lb_turn *t) {
    if (t->armed) return;
    t->armed = true;
    t->arms++;
    t->arm(t);
}

void lb_turn_run(lb_turn *t) {
    t->armed = false;
    t->fn(t);
}

static plink *the_link; /* one measurement at a time: the driver's thread */

static void plink_send(lb_work *w, int side, const void *bytes, size_t len) {
    plink *l = (plink *)(void *)((char *)w - offsetof(plink, w));
    pframe *f = l->free;
    if (!f || len > sizeof f->bytes) {
        l->error = -ENOSPC;
        return;
    }
    l->free = f->next;
    f->next = NULL;
    f->len = len;
    memcpy(f->bytes, bytes, len);
    int to = 1 - side;
    if (l->tail[to]) {
        l->tail[to]->next = f;
    } else {
        l->head[to] = f;
    }
    l->tail[to] = f;
    turn_claim(l->deliver[to]);
}

static void plink_refresh(lb_work *w) {
    plink *l = (plink *)(void *)((char *)w - offsetof(plink, w));
    turn_claim(l->refresh);
}

static void plink_deliver(lb_turn *t) {
    plink *l = the_link;
    int side = t == l->deliver[0] ? 0 : 1;
    pframe *f = l->head[side];
    if (!f) return;
    l->head[side] = f->next;
    if (!l->head[side]) l->tail[side] = NULL;
    lb_work_frame(&l->w, side, f->bytes, f->len);
    f->next = l->free;
    l->free = f;
    if (l->head[side]) turn_claim(t);
    if (l->w.done) l->loop->stop(l->loop->loop);
}

static void plink_refresh_turn(lb_turn *t) {
    (void)t;
    lb_work_refresh(&the_link->w);
}

static const lb_link_ops plink_ops = {plink_send, plink_refresh};

static int plink_run_once(plink *l, int wl, const lb_params *p) {
    lb_work_init(&l->w, &plink_ops, wl, p);
    lb_work_start(&l->w);
    l->loop->run(l->loop->loop);
    if (l->error) return l->error;
    if (!l->w.done || l->w.frames != lb_work_expected_frames(wl, p))
        return -EPROTO;
    return 0;
}

int lb_idle_open(int fds[2]) {
    return turns_open_sockets(fds, 2);
}

void lb_idle_close(int fds[2]) {
    turns_close_sockets(fds, 2);
}

int lb_link_measure(const lb_params *p, lb_turn *to_client, lb_turn *to_server,
                    lb_turn *refresh, const lb_loop *loop, lb_result *out) {
    plink *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->loop = loop;
    for (int i = 0; i < POOL; i++) {
        l->pool[i].next = l->free;
        l->free = &l->pool[i];
    }
    lb_turn *turns[3] = {to_client, to_server, refresh};
    l->deliver[0] = to_client;
    l->deliver[1] = to_server;
    l->refresh = refresh;
    to_client->fn = to_server->fn = plink_deliver;
    refresh->fn = plink_refresh_turn;
    the_link = l;
    int rc = 0;
    for (int wl = 0; wl < LB_WORKLOADS && rc == 0; wl++) {
        /* Repeated rows first run once unmeasured (caches, lazy set-up). */
        if (p->reps > 1) rc = plink_run_once(l, wl, p);
        uint64_t arms0 = 0, timers0 = 0;
        for (int i = 0; i < 3; i++) {
            arms0 += turns[i]->arms;
            if (turns[i]->is_timer) timers0 += turns[i]->arms;
        }
        double dur[LB_MAX_REPS];
        int n = 0;
        uint64_t polls0 = turns_polls();
        for (int rep = 0; rep < p->reps && n < LB_MAX_REPS && rc == 0; rep++) {
            uint64_t t0 = lab_now_ns();
            rc = plink_run_once(l, wl, p);
            dur[n++] = (double)(lab_now_ns() - t0);
        }
        out->polls[wl] = (double)(turns_polls() - polls0) / p->reps;
        uint64_t arms1 = 0, timers1 = 0;
        for (int i = 0; i < 3; i++) {
            arms1 += turns[i]->arms;
            if (turns[i]->is_timer) timers1 += turns[i]->arms;
        }
        out->ms[wl] = lab_percentile(dur, (size_t)n, 0.5) / 1e6;
        out->frames[wl] = (double)l->w.frames;
        out->turns[wl] = (double)(arms1 - arms0) / p->reps;
        out->timers[wl] = (double)(timers1 - timers0) / p->reps;
    }
    the_link = NULL;
    free(l);
    return rc;
}
