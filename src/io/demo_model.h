/* demo_model.h — where the demo model shipped with ember lives.
 *
 * The demo model (models/demo in the source tree) is what `ember serve`,
 * `ember chat` and `ember generate` use when no MODEL is given. */
#ifndef EMBER_IO_DEMO_MODEL_H
#define EMBER_IO_DEMO_MODEL_H

/* The demo model's directory, or NULL when none is found. A directory counts
 * when it holds a config.json. Candidates, first match wins:
 *   1. $EMBER_DEMO_MODEL — when set (non-empty) it is the only candidate, so
 *      an explicit choice never silently falls back to another model;
 *   2. <directory of /proc/self/exe>/../models/demo  (the build tree:
 *      build/ember -> models/demo);
 *   3. <directory of /proc/self/exe>/../share/ember/models/demo  (installed);
 *   4. the source tree's models/demo, compiled in as EMBER_DEMO_MODEL_SRC_DIR.
 * The environment and the file system are consulted once, at the first call
 * (thread-safe); later calls return the same answer. The string is owned by
 * the library and lives until exit. */
const char *em_demo_model_dir(void);

#endif
