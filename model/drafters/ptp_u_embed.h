// PTP's input for an auxiliary row (docs/ptp.md): instead of a token
// embedding, the row carries u_embed(u), the piecewise-linear interpolation
// through three learned vectors at u = 0, 0.5 and 1 (`u_embed.weight`
// [3, dim] of the adapter). Computed in float32 from u rounded to float, as
// the Python reference does, so stage 0 feeds the adapter what it was
// trained on.
#pragma once

#include <span>

namespace specline {

// out[i] = w0 * weight[0][i] + w1 * weight[1][i] + w2 * weight[2][i] with
// w0 = max(0, 1 - 2u), w1 = 1 - |2u - 1|, w2 = max(0, 2u - 1).
// weight holds 3 * out.size() values, row-major.
void PtpUEmbed(double u, std::span<const float> weight, std::span<float> out);

}  // namespace specline
