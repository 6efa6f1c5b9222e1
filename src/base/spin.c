/* spin.c — poll-before-sleep waits (see spin.h). */
#include "base/spin.h"

#include "base/config.h"
#include "base/threadpool.h"
#include "base/timer.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPIN_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define SPIN_PAUSE() __asm__ __volatile__("yield")
#else
#define SPIN_PAUSE() ((void)0)
#endif

#define SPIN_AUTO_US 2000
#define SPIN_MIN_CORES 4

static atomic_long window_us;
static atomic_int max_spinners, spinners;

void em_spin_configure(bool host_spare) {
    long long us = em_config_int(em_config_global(), EMC_SPIN_US);
    int cores = em_cpu_count();
    if (us < 0) us = host_spare && cores >= SPIN_MIN_CORES ? SPIN_AUTO_US : 0;
    atomic_store(&max_spinners, cores / 4 > 1 ? cores / 4 : 1);
    atomic_store(&window_us, (long)us);
}

double em_spin_window(void) { return (double)atomic_load_explicit(&window_us, memory_order_relaxed) * 1e-6; }

bool em_spin_until_changed(const atomic_uint *word, unsigned seen, double seconds) {
    if (seconds <= 0) return atomic_load_explicit(word, memory_order_acquire) != seen;
    double until = em_now() + seconds;
    for (;;) {
        /* the clock is read once per 64 polls: a poll costs a few ns */
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(word, memory_order_acquire) != seen) return true;
            SPIN_PAUSE();
        }
        if (em_now() >= until) return false;
    }
}

bool em_spin_claim(void) {
    if (em_spin_window() <= 0) return false;
    if (atomic_fetch_add(&spinners, 1) < atomic_load(&max_spinners)) return true;
    atomic_fetch_sub(&spinners, 1);
    return false;
}

void em_spin_release(void) { atomic_fetch_sub(&spinners, 1); }

void em_spin_unlocked(pthread_mutex_t *mu, const atomic_uint *word, double seconds, bool claim) {
    if (seconds <= 0 || (claim && !em_spin_claim())) return;
    unsigned seen = atomic_load_explicit(word, memory_order_acquire);
    pthread_mutex_unlock(mu);
    em_spin_until_changed(word, seen, seconds);
    if (claim) em_spin_release();
    pthread_mutex_lock(mu);
}
