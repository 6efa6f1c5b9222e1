/* spin.h — waiting for a word to change by polling it before sleeping.
 *
 * A thread asleep on a condition variable takes 50–200 us to run again
 * once woken on an otherwise idle machine (the core leaves its idle state,
 * the scheduler places the thread): the server's request passes through
 * three such hand-offs (HTTP thread -> worker -> engine scheduler -> HTTP
 * thread), as long together as a cached prompt's whole forward on a GPU.
 * A thread that expects its next work within a few milliseconds therefore
 * polls an atomic word first and sleeps only when the window passes.
 *
 * The window is EMBER_SPIN_US. Its default (-1) polls for 2000 us where a
 * model computes on a GPU and the machine has 4 or more cores, and never
 * otherwise: a model on the CPU needs every core, and a polling thread
 * would stall its thread pool. */
#ifndef EMBER_BASE_SPIN_H
#define EMBER_BASE_SPIN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Resolves the window from the process configuration; host_spare: the
 * model computes on a device, so the host's cores are idle meanwhile.
 * Until it is called the window is 0. */
void em_spin_configure(bool host_spare);
/* The polling window in seconds (0: never poll). */
double em_spin_window(void);

/* Polls *word until it differs from seen or `seconds` pass; true when it
 * changed. Never sleeps; the caller sleeps on its condition variable
 * afterwards when this returns false. */
bool em_spin_until_changed(const atomic_uint *word, unsigned seen, double seconds);

/* With *mu held: notes *word, unlocks mu, polls for up to `seconds`
 * (claiming a polling slot first when `claim`; none free: no poll), then
 * locks mu again. The caller rechecks its condition and sleeps as usual. */
void em_spin_unlocked(pthread_mutex_t *mu, const atomic_uint *word, double seconds, bool claim);

/* Claims one of the few polling slots the process allows at once (a
 * quarter of the cores), so that many waiting threads never crowd out the
 * working ones; false when none is free. em_spin_release gives it back. */
bool em_spin_claim(void);
void em_spin_release(void);

#endif
