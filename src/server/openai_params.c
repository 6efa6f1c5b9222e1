/* openai_params.c — typed field access and the shared OpenAI fields. */
#include "server/openai_params.h"

#include "base/alloc.h"
#include "engine/events.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OAI_MAX_N 16
#define OAI_MAX_STOP 16
#define OAI_MAX_STOP_LEN 256
#define OAI_MAX_BIAS 1024

bool oai_fail(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

bool oai_get_bool(json_t *o, const char *key, bool *out, bool *present, oai_error *e) {
    json_t *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!json_is_boolean(v)) return oai_fail(e, 400, "invalid_type", key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

bool oai_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *present,
                 oai_error *e) {
    json_t *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v); /* 3.0 is an integer in JSON */
    else return oai_fail(e, 400, "invalid_type", key, "'%s' must be an integer", key);
    if (x < lo || x > hi)
        return oai_fail(e, 400, "invalid_value", key, "'%s' must be between %lld and %lld (got %lld)", key, lo, hi, x);
    *out = x;
    return true;
}

bool oai_get_number(json_t *o, const char *key, double lo, double hi, double *out, bool *present, oai_error *e) {
    json_t *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!json_is_number(v)) return oai_fail(e, 400, "invalid_type", key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return oai_fail(e, 400, "invalid_value", key, "'%s' must be between %g and %g (got %g)", key, lo, hi, x);
    *out = x;
    return true;
}

static bool add_stop(em_request *req, json_t *s, const char *param, oai_error *e) {
    if (!json_is_string(s)) return oai_fail(e, 400, "invalid_type", param, "'stop' must be a string or a list of strings");
    size_t len = json_string_length(s);
    if (!len) return oai_fail(e, 400, "invalid_value", param, "stop strings must not be empty");
    if (len > OAI_MAX_STOP_LEN)
        return oai_fail(e, 400, "invalid_value", param, "stop strings are limited to %d bytes", OAI_MAX_STOP_LEN);
    if (memchr(json_string_value(s), 0, len))
        return oai_fail(e, 400, "invalid_value", param, "stop strings must not contain NUL");
    if (em_request_add_stop(req, json_string_value(s), len) != EM_OK)
        return oai_fail(e, 500, NULL, param, "out of memory");
    return true;
}

static bool parse_stop(json_t *body, em_request *req, oai_error *e) {
    json_t *v = field(body, "stop");
    if (!v) return true;
    if (json_is_string(v)) return add_stop(req, v, "stop", e);
    if (!json_is_array(v)) return oai_fail(e, 400, "invalid_type", "stop", "'stop' must be a string or a list of strings");
    if (json_array_size(v) > OAI_MAX_STOP)
        return oai_fail(e, 400, "invalid_value", "stop", "at most %d stop strings are allowed", OAI_MAX_STOP);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        char param[32];
        snprintf(param, sizeof param, "stop[%zu]", i);
        if (!add_stop(req, s, param, e)) return false;
    }
    return true;
}

static bool parse_logit_bias(json_t *body, int vocab, em_request *req, oai_error *e) {
    json_t *v = field(body, "logit_bias");
    if (!v) return true;
    if (!json_is_object(v)) return oai_fail(e, 400, "invalid_type", "logit_bias", "'logit_bias' must be an object");
    size_t n = json_object_size(v);
    if (n > OAI_MAX_BIAS)
        return oai_fail(e, 400, "invalid_value", "logit_bias", "at most %d logit_bias entries are allowed", OAI_MAX_BIAS);
    if (!n) return true;
    req->bias_ids = em_mallocn(n, sizeof *req->bias_ids);
    req->bias_values = em_mallocn(n, sizeof *req->bias_values);
    if (!req->bias_ids || !req->bias_values) return oai_fail(e, 500, NULL, "logit_bias", "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id >= vocab)
            return oai_fail(e, 400, "invalid_value", "logit_bias",
                            "logit_bias key '%.40s' is not a token id of this model (0..%d)", key, vocab - 1);
        if (!json_is_number(val) || !(json_number_value(val) >= -100 && json_number_value(val) <= 100))
            return oai_fail(e, 400, "invalid_value", "logit_bias", "logit_bias values must be numbers in [-100, 100]");
        req->bias_ids[req->n_bias] = (int32_t)id;
        req->bias_values[req->n_bias] = (float)json_number_value(val);
        req->n_bias++;
    }
    return true;
}

static bool parse_sampling(json_t *body, em_request *req, oai_error *e) {
    double x;
    long long k;
    bool has;
    em_sampling *s = &req->sampling;
    if (!oai_get_number(body, "temperature", 0, 2, &x, &has, e)) return false;
    if (has) s->temperature = (float)x, req->set |= EM_SET_TEMPERATURE;
    if (!oai_get_number(body, "top_p", 0, 1, &x, &has, e)) return false;
    if (has) s->top_p = x > 0 ? (float)x : 1e-6f, req->set |= EM_SET_TOP_P;
    if (!oai_get_int(body, "top_k", -1, 1 << 30, &k, &has, e)) return false;
    if (has) s->top_k = k < 0 ? 0 : (int)k, req->set |= EM_SET_TOP_K;
    if (!oai_get_number(body, "min_p", 0, 1, &x, &has, e)) return false;
    if (has) s->min_p = (float)x, req->set |= EM_SET_MIN_P;
    if (!oai_get_number(body, "presence_penalty", -2, 2, &x, &has, e)) return false;
    if (has) s->presence_penalty = (float)x, req->set |= EM_SET_PRESENCE;
    if (!oai_get_number(body, "frequency_penalty", -2, 2, &x, &has, e)) return false;
    if (has) s->frequency_penalty = (float)x, req->set |= EM_SET_FREQUENCY;
    if (!oai_get_number(body, "repetition_penalty", 1e-3, 100, &x, &has, e)) return false;
    if (has) s->repetition_penalty = (float)x, req->set |= EM_SET_REPETITION;
    if (!oai_get_int(body, "seed", INT64_MIN, INT64_MAX, &k, &has, e)) return false;
    if (has) s->seed = (uint64_t)k, s->has_seed = 1, req->set |= EM_SET_SEED;
    return true;
}

bool oai_parse_common(json_t *body, const char *served_model, int vocab, em_request *req, oai_stream_opts *so,
                      oai_error *e) {
    json_t *model = field(body, "model");
    if (model && !json_is_string(model)) return oai_fail(e, 400, "invalid_type", "model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), served_model))
        return oai_fail(e, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves '%s'",
                        json_string_value(model), served_model);
    if (!oai_get_bool(body, "stream", &so->stream, NULL, e)) return false;
    json_t *sopt = field(body, "stream_options");
    if (sopt && !json_is_object(sopt))
        return oai_fail(e, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
    if (sopt && !oai_get_bool(sopt, "include_usage", &so->include_usage, NULL, e)) return false;
    long long k;
    bool has;
    if (!oai_get_int(body, "n", 1, OAI_MAX_N, &k, &has, e)) return false;
    if (has) req->n = (int)k;
    if (!oai_get_bool(body, "ignore_eos", &req->ignore_eos, NULL, e)) return false;
    if (!parse_sampling(body, req, e)) return false;
    if (!parse_stop(body, req, e)) return false;
    return parse_logit_bias(body, vocab, req, e);
}
