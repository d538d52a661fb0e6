/* wait_for.h: a test's wait for another thread's progress, shared by the unit tests. */
#ifndef WAIT_FOR_H
#define WAIT_FOR_H

#include <unistd.h>

#include "prt.h"

/* Waits until *counter reaches want; 0 if it has not after 60 s (a hang guard, far beyond
 * any machine's speed: the verdicts are the callers', never this wait's length). */
static int wait_for_count(const int *counter, int want)
{
    double give_up = pr_now() + 60;
    while (__atomic_load_n(counter, __ATOMIC_SEQ_CST) < want) {
        if (pr_now() > give_up)
            return 0;
        usleep(1000);
    }
    return 1;
}

#endif
