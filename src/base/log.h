/* log.h — leveled logging to stderr. The level is set once at start-up. */
#ifndef EMBER_BASE_LOG_H
#define EMBER_BASE_LOG_H

#include "base/status.h"

typedef enum { EM_LOG_ERROR = 0, EM_LOG_WARN, EM_LOG_INFO, EM_LOG_DEBUG } em_log_level;

void em_log_set_level(em_log_level lvl);
em_log_level em_log_get_level(void);
void em_log(em_log_level lvl, const char *fmt, ...) EM_PRINTF(2, 3);

#define EM_LOGE(...) em_log(EM_LOG_ERROR, __VA_ARGS__)
#define EM_LOGW(...) em_log(EM_LOG_WARN, __VA_ARGS__)
#define EM_LOGI(...) em_log(EM_LOG_INFO, __VA_ARGS__)
#define EM_LOGD(...) em_log(EM_LOG_DEBUG, __VA_ARGS__)

#endif
