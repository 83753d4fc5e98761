/* stdio_gone.h: a program that closed its stdin, stdout and stderr (a
 * daemon that did not reopen them on /dev/null), for the cases that check
 * an fd of lull's never takes 0, 1 or 2. Include after check.h. */
#ifndef LULL_TESTS_STDIO_GONE_H
#define LULL_TESTS_STDIO_GONE_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

typedef struct stdio_gone {
    int saved[3];   /* copies of 0 to 2, to give them back */
    bool stayed[3]; /* at stdio_back: still closed (nothing took it) */
} stdio_gone;

/* 0 to 2 closed, their copies kept; what is buffered goes out first. */
static inline void stdio_close(stdio_gone *g) {
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 3; i++) {
        g->saved[i] = dup(i);
        CHECK(g->saved[i] > 2);
    }
    for (int i = 0; i < 3; i++)
        close(i);
}

/* 0 to 2 back, before any check can print; g->stayed says which were
 * still closed. */
static inline void stdio_back(stdio_gone *g) {
    for (int i = 0; i < 3; i++)
        g->stayed[i] = fcntl(i, F_GETFD) < 0;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(dup2(g->saved[i], i), i);
        close(g->saved[i]);
    }
}

/* Each of 0 to 2 was still closed at stdio_back. */
#define CHECK_STDIO_STAYED_CLOSED(g)                                           \
    do {                                                                       \
        for (int i_ = 0; i_ < 3; i_++)                                         \
            CHECK((g)->stayed[i_]);                                            \
    } while (0)

#endif
