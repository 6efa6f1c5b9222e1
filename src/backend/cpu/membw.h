/* membw.h — measured memory read bandwidth of this machine (bytes/s). */
#ifndef EMBER_BACKEND_CPU_MEMBW_H
#define EMBER_BACKEND_CPU_MEMBW_H

#include "base/threadpool.h"

#include <stddef.h>

/* Streams `bytes` of memory with every thread of pool; best of 5 passes. */
double cpu_read_bandwidth(em_pool *pool, size_t bytes);

#endif
