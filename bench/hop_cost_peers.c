/* The peers' side of bench/callgrind_hops.sh: N hops of each peer's
 * next-iteration chain or zero-delay timer chain, with one idle socket
 * watched as in lull-lab. Modes exist only for the peers found at build
 * time; `hop_cost_peers list` prints them.
 *
 *   hop_cost_peers MODE N
 *   modes: uv-idle uv-timer0 ev-idle ev-timer0
 *          event-active (one-pass drain, no I/O check)
 *          event-active-checked (max_dispatch_interval: 1 callback)
 *          event-active-500us (max_dispatch_interval: 500 us, lull's
 *                              default quantum)
 *          event-timer0 */
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned long left;
static int sv[2];

#ifdef LAB_HAVE_UV
#include <uv.h>

static uv_poll_t uv_io;

static void uv_io_cb(uv_poll_t *h, int status, int events) {
    (void)h;
    (void)status;
    (void)events;
}

static void uv_idle_hop(uv_idle_t *h) {
    if (--left == 0) {
        uv_idle_stop(h);
        uv_poll_stop(&uv_io);
    }
}

static void uv_timer_hop(uv_timer_t *h) {
    if (--left > 0) {
        uv_timer_start(h, uv_timer_hop, 0, 0);
    } else {
        uv_poll_stop(&uv_io);
    }
}

static int run_uv(int timer) {
    uv_loop_t loop;
    uv_idle_t idle;
    uv_timer_t t;
    uv_loop_init(&loop);
    uv_poll_init(&loop, &uv_io, sv[0]);
    uv_poll_start(&uv_io, UV_READABLE, uv_io_cb);
    uv_idle_init(&loop, &idle);
    uv_timer_init(&loop, &t);
    if (timer) {
        uv_timer_start(&t, uv_timer_hop, 0, 0);
    } else {
        uv_idle_start(&idle, uv_idle_hop);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&uv_io, NULL);
    uv_close((uv_handle_t *)&idle, NULL);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    return uv_loop_close(&loop);
}
#endif

#ifdef LAB_HAVE_EV
#include <ev.h>

static ev_io ev_sock;

static void ev_io_cb(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
}

static void ev_idle_hop(struct ev_loop *loop, ev_idle *w, int revents) {
    (void)revents;
    if (--left == 0) {
        ev_idle_stop(loop, w);
        ev_io_stop(loop, &ev_sock);
    }
}

static void ev_timer_hop(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)revents;
    if (--left > 0) {
        ev_timer_set(w, 0., 0.);
        ev_timer_start(loop, w);
    } else {
        ev_io_stop(loop, &ev_sock);
    }
}

static int run_ev(int timer) {
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    ev_idle idle;
    ev_timer t;
    ev_io_init(&ev_sock, ev_io_cb, sv[0], EV_READ);
    ev_io_start(loop, &ev_sock);
    ev_idle_init(&idle, ev_idle_hop);
    ev_timer_init(&t, ev_timer_hop, 0., 0.);
    if (timer) {
        ev_timer_start(loop, &t);
    } else {
        ev_idle_start(loop, &idle);
    }
    ev_run(loop, 0);
    ev_loop_destroy(loop);
    return 0;
}
#endif

#ifdef LAB_HAVE_EVENT
#include <event2/event.h>
#include <event2/event_struct.h>

static struct event ev_hop, ev_sock_event;
static int event_timer_mode;

static void event_io_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
}

static void event_hop_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
    static const struct timeval zero = {0, 0};
    if (--left == 0) {
        event_del(&ev_sock_event);
    } else if (event_timer_mode) {
        evtimer_add(&ev_hop, &zero);
    } else {
        event_active(&ev_hop, EV_TIMEOUT, 0);
    }
}

/* checked: 0 = drain the active queue (libevent's default), 1 = check I/O
 * after every callback, 2 = after 500 us of callbacks (lull's quantum). */
static int run_event(int timer, int checked) {
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    if (checked == 1) event_config_set_max_dispatch_interval(cfg, NULL, 1, 0);
    if (checked == 2) {
        static const struct timeval quantum = {0, 500};
        event_config_set_max_dispatch_interval(cfg, &quantum, -1, 0);
    }
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    event_timer_mode = timer;
    event_assign(&ev_sock_event, base, sv[0], EV_READ | EV_PERSIST, event_io_cb,
                 NULL);
    event_add(&ev_sock_event, NULL);
    event_assign(&ev_hop, base, -1, 0, event_hop_cb, NULL);
    if (timer) {
        static const struct timeval zero = {0, 0};
        evtimer_add(&ev_hop, &zero);
    } else {
        event_active(&ev_hop, EV_TIMEOUT, 0);
    }
    event_base_loop(base, 0);
    event_base_free(base);
    return 0;
}
#endif

static const char *const modes[] = {
#ifdef LAB_HAVE_UV
    "uv-idle",
    "uv-timer0",
#endif
#ifdef LAB_HAVE_EV
    "ev-idle",
    "ev-timer0",
#endif
#ifdef LAB_HAVE_EVENT
    "event-active",
    "event-active-checked",
    "event-active-500us",
    "event-timer0",
#endif
    NULL,
};

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (int i = 0; modes[i]; i++)
            printf("%s\n", modes[i]);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: hop_cost_peers MODE N | list\n");
        return 2;
    }
    const char *mode = argv[1];
    unsigned long long n;
    /* 10^12: an hour and more at a few ns a hop */
    if (!bench_count(argv[2], 1, 1000000000000ull, &n)) {
        fprintf(stderr, "hop_cost_peers: N takes 1..1000000000000, not '%s'\n",
                argv[2]);
        return 2;
    }
    left = (unsigned long)n;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    int rc = -1;
    (void)mode;
#ifdef LAB_HAVE_UV
    if (strcmp(mode, "uv-idle") == 0) rc = run_uv(0);
    if (strcmp(mode, "uv-timer0") == 0) rc = run_uv(1);
#endif
#ifdef LAB_HAVE_EV
    if (strcmp(mode, "ev-idle") == 0) rc = run_ev(0);
    if (strcmp(mode, "ev-timer0") == 0) rc = run_ev(1);
#endif
#ifdef LAB_HAVE_EVENT
    if (strcmp(mode, "event-active") == 0) rc = run_event(0, 0);
    if (strcmp(mode, "event-active-checked") == 0) rc = run_event(0, 1);
    if (strcmp(mode, "event-active-500us") == 0) rc = run_event(0, 2);
    if (strcmp(mode, "event-timer0") == 0) rc = run_event(1, 0);
#endif
    close(sv[0]);
    close(sv[1]);
    if (rc == -1) {
        fprintf(stderr, "hop_cost_peers: mode '%s' not built\n", mode);
        return 2;
    }
    if (left != 0) {
        fprintf(stderr, "hop_cost_peers: %lu hops left\n", left);
        return 1;
    }
    return rc == 0 ? 0 : 1;
}
