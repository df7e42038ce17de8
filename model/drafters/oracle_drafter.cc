#include "model/drafters/oracle_drafter.h"

#include <stdexcept>
#include <string>

namespace specline {

OracleDrafter::OracleDrafter(double alpha, uint64_t seed) : alpha_(alpha), rng_(seed) {
  if (!(alpha >= 0.0 && alpha <= 1.0)) {
    throw std::invalid_argument("OracleDrafter: alpha must be in [0, 1], got " +
                                std::to_string(alpha));
  }
}

int32_t OracleDrafter::Propose(int32_t true_token, int32_t vocab_size) {
  if (vocab_size < 2) {
    throw std::invalid_argument("OracleDrafter: vocab_size must be >= 2, got " +
                                std::to_string(vocab_size));
  }
  if (true_token < 0 || true_token >= vocab_size) {
    throw std::invalid_argument("OracleDrafter: true token " + std::to_string(true_token) +
                                " outside [0, " + std::to_string(vocab_size) + ")");
  }
  // u in [0, 1): alpha = 1 always tells the truth, alpha = 0 never does.
  if (rng_.Uniform() < alpha_) return true_token;
  // Uniform over the vocab_size - 1 other tokens: pick a rank k among them
  // and skip over the true token. 53 random bits make the floor's bias
  // negligible for any 32-bit vocabulary.
  const int32_t others = vocab_size - 1;
  int32_t k = static_cast<int32_t>(rng_.Uniform() * others);
  if (k >= others) k = others - 1;
  return k < true_token ? k : k + 1;
}

}  // namespace specline
