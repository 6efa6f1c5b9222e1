/* rope.c — inverse frequencies for default, linear, llama3 and yarn rope. */
#include "model/rope.h"

#include <math.h>

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rotations, int dim, double base, double max_pos) {
    return (dim * log(max_pos / (rotations * 2 * M_PI))) / (2 * log(base));
}

static void yarn(const rope_config *r, int dim, int max_pos, float *inv, float *attn) {
    double factor = r->factor;
    double orig = r->has_original_max_pos ? r->original_max_pos : max_pos;
    double af = r->attention_factor;
    if (!(af > 0)) {
        if (r->mscale > 0 && r->mscale_all_dim > 0)
            af = yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim);
        else
            af = yarn_mscale(factor, 1.0);
    }
    double low = yarn_correction_dim(r->beta_fast, dim, r->theta, orig);
    double high = yarn_correction_dim(r->beta_slow, dim, r->theta, orig);
    if (r->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        float pos_freq = powf((float)r->theta, (float)(2 * i) / (float)dim);
        float extrap = 1.0f / pos_freq, interp = 1.0f / ((float)factor * pos_freq);
        float ramp = (float)(((double)i - low) / (high - low));
        if (ramp < 0) ramp = 0;
        if (ramp > 1) ramp = 1;
        float extrap_factor = 1.0f - ramp;
        inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
    *attn = (float)af;
}

static void llama3(const rope_config *r, int dim, float *inv) {
    double low_wavelen = r->original_max_pos / r->low_freq_factor;
    double high_wavelen = r->original_max_pos / r->high_freq_factor;
    for (int i = 0; i < dim / 2; i++) {
        float f = inv[i];
        double wavelen = 2 * M_PI / f;
        float scaled = wavelen > low_wavelen ? (float)(f / r->factor) : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            double smooth = (r->original_max_pos / wavelen - r->low_freq_factor) /
                            (r->high_freq_factor - r->low_freq_factor);
            scaled = (float)((1 - smooth) * scaled / r->factor + smooth * scaled);
        }
        inv[i] = scaled;
    }
}

void rope_inv_freq(const rope_config *r, int rot_dim, int max_pos, float *inv_freq, float *attn_factor) {
    *attn_factor = 1.0f;
    if (r->kind == ROPE_YARN) {
        yarn(r, rot_dim, max_pos, inv_freq, attn_factor);
        return;
    }
    for (int i = 0; i < rot_dim / 2; i++)
        inv_freq[i] = 1.0f / powf((float)r->theta, (float)(2 * i) / (float)rot_dim);
    if (r->kind == ROPE_LINEAR)
        for (int i = 0; i < rot_dim / 2; i++) inv_freq[i] = (float)(inv_freq[i] / r->factor);
    else if (r->kind == ROPE_LLAMA3)
        llama3(r, rot_dim, inv_freq);
}
