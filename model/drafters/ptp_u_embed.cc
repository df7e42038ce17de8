#include "model/drafters/ptp_u_embed.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace specline {

void PtpUEmbed(double u, std::span<const float> weight, std::span<float> out) {
  const size_t dim = out.size();
  if (weight.size() != 3 * dim) throw std::invalid_argument("PtpUEmbed: weight must be [3, dim]");
  const float uf = static_cast<float>(u);
  const float w0 = std::max(0.0f, 1.0f - 2.0f * uf);
  const float w1 = 1.0f - std::fabs(2.0f * uf - 1.0f);
  const float w2 = std::max(0.0f, 2.0f * uf - 1.0f);
  for (size_t i = 0; i < dim; ++i) {
    out[i] = w0 * weight[i] + w1 * weight[dim + i] + w2 * weight[2 * dim + i];
  }
}

}  // namespace specline
