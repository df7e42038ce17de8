#include "model/formats/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"

namespace specline {

namespace {

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Q8_0: d = max|x| / 127, q = round(x / d).
void EncodeQ8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  for (int i = 0; i < 32; ++i) {
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * id)));
  }
}

// Q4_0: d = m / -8 where m is the value of largest magnitude (sign kept), so
// m itself maps to q = 0; q = x / d + 8 clamped to [0, 15]. Byte j holds
// element j (low nibble) and element j + 16 (high nibble).
void EncodeQ4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  for (int j = 0; j < 16; ++j) {
    int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = (x - min) / d rounded.
void EncodeQ4_1(const float* x, uint8_t* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  PutU16(out + 2, kernels::F32ToF16(lo));
  for (int j = 0; j < 16; ++j) {
    int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
    int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
    out[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}


// Q5_0: Q4_0 with 5 bits: d = m / -16, q = x / d + 16 clamped to [0, 31];
// the 5th bit of element j goes to bit j of qh.
void EncodeQ5_0(const float* x, uint8_t* out) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  const float d = m / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    out[6 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  std::memcpy(out + 2, &qh, 4);
}

// Q5_1: d = (max - min) / 31, m = min, q = (x - min) / d rounded.
void EncodeQ5_1(const float* x, uint8_t* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  PutU16(out + 2, kernels::F32ToF16(lo));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(31, static_cast<int>((x[j] - lo) * id + 0.5f));
    const int q1 = std::min(31, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
    out[8 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  std::memcpy(out + 4, &qh, 4);
}

// --- K-quants: ports of ggml's quantize_row_q{2,3,4,5,6}_K_ref (MIT,
// ggml-quants.c), the search llama-quantize runs without an importance
// matrix. Super-blocks of 256.

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest (ties to even) for |f| <= 4194303, as ggml does.
int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

float DecodeF16(uint16_t h) { return kernels::F16ToF32(h); }

// The element of largest magnitude, with its sign (the first one on ties).
float SignedAbsMax(const float* x, int n) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// NearestInt(v) clamped to the symmetric level range [-nmax, nmax - 1].
int SymmetricLevel(float v, int nmax) { return std::max(-nmax, std::min(nmax - 1, NearestInt(v))); }

// Symmetric quantization of n values to [-nmax, nmax - 1] (stored + nmax),
// searching scales around nmax / max weighted by x^2 (rmse_type 1).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = SymmetricLevel(iscale * x[i], nmax);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = SymmetricLevel(iscale * x[i], nmax);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + SymmetricLevel(iscale * x[i], nmax));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's symmetric search (make_q3_quants with do_rmse): coordinate descent
// on the weighted error; L stored + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = SymmetricLevel(iscale * x[i], nmax);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int new_l = SymmetricLevel(x[i] * sl2 / slx, nmax);
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ~ scale * L - min, L in [0, nmax], min >= 0
// returned in *the_min: a weighted least-squares search over nstep + 1
// candidate scales (make_qkx2_quants).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights,
                     uint8_t* L, float* the_min, uint8_t* Laux, float rmin,
                     float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void GetScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// Block layout: scales[16], qs[64], d, dmin.
void EncodeQ2_K(const float* x, uint8_t* out) {
  uint8_t* scales = out;
  uint8_t* qs = out + 16;
  uint8_t L[256], Laux[16];
  float weights[16], mins[16], sc[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    sc[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                           -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, sc[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint16_t d16 = 0, dmin16 = 0;
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) scales[j] = static_cast<uint8_t>(NearestInt(iscale * sc[j]));
    d16 = kernels::F32ToF16(max_scale / 15.0f);
  } else {
    for (int j = 0; j < 16; ++j) scales[j] = 0;
    d16 = kernels::F32ToF16(0.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) {
      scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
    }
    dmin16 = kernels::F32ToF16(max_min / 15.0f);
  } else {
    dmin16 = kernels::F32ToF16(0.0f);
  }
  PutU16(out + 80, d16);
  PutU16(out + 82, dmin16);
  for (int j = 0; j < 16; ++j) {
    const float d = DecodeF16(d16) * (scales[j] & 0xF);
    if (!d) continue;
    const float dm = DecodeF16(dmin16) * (scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                           (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

// Block layout: hmask[32], qs[64], scales[12], d.
void EncodeQ3_K(const float* x, uint8_t* out) {
  uint8_t* hmask = out;
  uint8_t* qs = out + 32;
  uint8_t* scales = out + 96;
  int8_t L[256];
  float sc[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    sc[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
    const float a = std::fabs(sc[j]);
    if (a > amax) {
      amax = a;
      max_scale = sc[j];
    }
  }
  std::memset(scales, 0, 12);
  uint16_t d16;
  if (max_scale) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int8_t l = static_cast<int8_t>(NearestInt(iscale * sc[j]));
      l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
      if (j < 8) {
        scales[j] = l & 0xF;
      } else {
        scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      }
      l = static_cast<int8_t>(l >> 4);
      scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    d16 = kernels::F32ToF16(1 / iscale);
  } else {
    d16 = kernels::F32ToF16(0.0f);
  }
  PutU16(out + 108, d16);
  for (int j = 0; j < 16; ++j) {
    int s = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    s = (s | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const float d = DecodeF16(d16) * s;
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  std::memset(hmask, 0, 32);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < 256; ++j) {
    if (L[j] > 3) {
      hmask[m] |= hm;
      L[j] = static_cast<int8_t>(L[j] - 4);
    }
    if (++m == 32) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                           (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

// Q4_K and Q5_K share the scale search and 6-bit scale packing; `bits` is
// 4 or 5. Block layout: d, dmin, scales[12], [qh[32] for Q5_K], qs[128].
void EncodeQ45_K(const float* x, uint8_t* out, int bits) {
  const int nmax = (1 << bits) - 1;
  uint8_t* scales = out + 4;
  uint8_t L[256], Laux[32];
  float weights[32], mins[8], sc[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    sc[j] = bits == 4 ? MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                       Laux, -1.0f, 0.1f, 20, false)
                      : MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                       Laux, -0.5f, 0.1f, 15, false);
    max_scale = std::max(max_scale, sc[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * sc[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  const uint16_t d16 = kernels::F32ToF16(max_scale / 63.0f);
  const uint16_t dmin16 = kernels::F32ToF16(max_min / 63.0f);
  PutU16(out, d16);
  PutU16(out + 2, dmin16);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    GetScaleMinK4(j, scales, &s, &m);
    const float d = DecodeF16(d16) * s;
    if (!d) continue;
    const float dm = DecodeF16(dmin16) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
  if (bits == 4) {
    uint8_t* q = out + 16;
    for (int j = 0; j < 256; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
    return;
  }
  uint8_t* qh = out + 16;
  uint8_t* ql = out + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
    ql += 32;
  }
}

// Block layout: ql[128], qh[64], int8 scales[16], d.
void EncodeQ6_K(const float* x, uint8_t* out) {
  int8_t L[256];
  float sc[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    sc[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
    const float a = std::fabs(sc[ib]);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = sc[ib];
    }
  }
  std::memset(out, 0, 210);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero, d = 0
  const float iscale = -128.0f / max_scale;
  const uint16_t d16 = kernels::F32ToF16(1 / iscale);
  PutU16(out + 208, d16);
  int8_t* scales = reinterpret_cast<int8_t*>(out + 192);
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * sc[ib])));
  }
  for (int j = 0; j < 16; ++j) {
    const float d = DecodeF16(d16) * scales[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF;
      const uint8_t q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF;
      const uint8_t q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

}  // namespace

std::vector<uint8_t> EncodeValues(DType dtype, const float* src, int64_t n) {
  auto bytes = RowBytes(dtype, n);
  if (!bytes) {
    throw std::invalid_argument(std::to_string(n) + " values are not a whole number of " +
                                std::string(DTypeName(dtype)) + " blocks");
  }
  std::vector<uint8_t> out(*bytes);
  EncodeValuesInto(dtype, src, n, out.data());
  return out;
}

void EncodeValuesInto(DType dtype, const float* src, int64_t n, uint8_t* o) {
  if (!RowBytes(dtype, n)) {
    throw std::invalid_argument(std::to_string(n) + " values are not a whole number of " +
                                std::string(DTypeName(dtype)) + " blocks");
  }
  switch (dtype) {
    case DType::kF32:
      std::memcpy(o, src, n * 4);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) PutU16(o + 2 * i, kernels::F32ToF16(src[i]));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) PutU16(o + 2 * i, kernels::F32ToBF16(src[i]));
      break;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ8_0(src + 32 * b, o + 34 * b);
      break;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ4_0(src + 32 * b, o + 18 * b);
      break;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ4_1(src + 32 * b, o + 20 * b);
      break;
    case DType::kQ5_0:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ5_0(src + 32 * b, o + 22 * b);
      break;
    case DType::kQ5_1:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ5_1(src + 32 * b, o + 24 * b);
      break;
    case DType::kQ2_K:
      for (int64_t b = 0; b < n / 256; ++b) EncodeQ2_K(src + 256 * b, o + 84 * b);
      break;
    case DType::kQ3_K:
      for (int64_t b = 0; b < n / 256; ++b) EncodeQ3_K(src + 256 * b, o + 110 * b);
      break;
    case DType::kQ4_K:
      for (int64_t b = 0; b < n / 256; ++b) EncodeQ45_K(src + 256 * b, o + 144 * b, 4);
      break;
    case DType::kQ5_K:
      for (int64_t b = 0; b < n / 256; ++b) EncodeQ45_K(src + 256 * b, o + 176 * b, 5);
      break;
    case DType::kQ6_K:
      for (int64_t b = 0; b < n / 256; ++b) EncodeQ6_K(src + 256 * b, o + 210 * b);
      break;
  }
}

}  // namespace specline
