// PreparedAs: a policy reads back its own preparation, and a preparation
// of another type ends the process instead of being read as the wrong one.
#include <gtest/gtest.h>

#include <memory>

#include "scheduler/prepared_request.h"

namespace specline::scheduler {
namespace {

struct Compressed : PreparedRequest {
  int pairs = 7;
};
struct Other : PreparedRequest {};

TEST(PreparedRequestTest, ReadsBackItsOwnType) {
  std::shared_ptr<const PreparedRequest> p = std::make_shared<Compressed>();
  EXPECT_EQ(PreparedAs<Compressed>(p.get()).pairs, 7);
}

TEST(PreparedRequestDeathTest, AnotherTypeOrNoneEndsTheProcess) {
  Other other;
  EXPECT_DEATH(PreparedAs<Compressed>(&other), "");
  EXPECT_DEATH(PreparedAs<Compressed>(nullptr), "");
}

}  // namespace
}  // namespace specline::scheduler
