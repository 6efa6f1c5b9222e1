/* timer.h — monotonic clock. */
#ifndef EMBER_BASE_TIMER_H
#define EMBER_BASE_TIMER_H

#include <stdint.h>
#include <time.h>

static inline double em_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
