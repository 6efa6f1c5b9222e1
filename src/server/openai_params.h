/* openai_params.h — reading OpenAI request fields into the internal request:
 * typed getters with range checks and the fields Chat Completions and
 * Completions share (model, stream, sampling, stop, logit_bias, n...).
 * A JSON null counts as absent, as the OpenAI API treats it. */
#ifndef EMBER_SERVER_OPENAI_PARAMS_H
#define EMBER_SERVER_OPENAI_PARAMS_H

#include "engine/request.h"

#include <jansson.h>
#include <stdbool.h>

typedef struct oai_error {
    int status;        /* 400, 404... */
    const char *code;  /* static string or NULL */
    char param[128];
    char message[512];
} oai_error;

/* Fills e and returns false (for `return oai_fail(...)`). */
bool oai_fail(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Getters: true when the field is absent (untouched *out, *present false)
 * or valid; false with e filled on a wrong type or a value out of range. */
bool oai_get_bool(json_t *o, const char *key, bool *out, bool *present, oai_error *e);
bool oai_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *present,
                 oai_error *e);
bool oai_get_number(json_t *o, const char *key, double lo, double hi, double *out, bool *present, oai_error *e);

typedef struct oai_stream_opts {
    bool stream;
    bool include_usage;
} oai_stream_opts;

/* The fields both endpoints share. served_model: the name the model answers
 * to (a different "model" is a 404); vocab: for logit_bias ids. */
bool oai_parse_common(json_t *body, const char *served_model, int vocab, em_request *req, oai_stream_opts *so,
                      oai_error *e);

#endif
