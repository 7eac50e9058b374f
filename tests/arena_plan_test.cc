#include "runtime/arena_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

void expect_no_overlap_while_alive(const std::vector<BufferLifetime>& buffers,
                                   const ArenaPlan& plan) {
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_LE(plan.offsets[i] + buffers[i].bytes, plan.bytes);
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const bool alive_together =
          buffers[i].first <= buffers[j].last && buffers[j].first <= buffers[i].last;
      const bool overlap = plan.offsets[i] < plan.offsets[j] + buffers[j].bytes &&
                           plan.offsets[j] < plan.offsets[i] + buffers[i].bytes;
      EXPECT_FALSE(alive_together && overlap) << "buffers " << i << " and " << j;
    }
  }
}

TEST(ArenaPlanTest, BuffersAliveTogetherNeverOverlap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> buffers;
    for (int step = 0; step < 40; ++step) {
      const int outputs = 1 + static_cast<int>(rng() % 2);
      for (int k = 0; k < outputs; ++k)
        buffers.push_back({64 * (1 + rng() % 100), step, step + static_cast<int>(rng() % 6)});
    }
    expect_no_overlap_while_alive(buffers, plan_arena(buffers));
  }
}

TEST(ArenaPlanTest, ChainNeedsTwoSlots) {
  std::vector<BufferLifetime> chain;
  for (int step = 0; step < 10; ++step) chain.push_back({4096, step, step + 1});
  EXPECT_EQ(plan_arena(chain).bytes, 2u * 4096u);
}

TEST(ArenaPlanTest, TakesThePlaceFreedMostRecently) {
  // A is read at step 1, where B is written, so they sit apart; C reuses A's bytes at step 2.
  // B is read last (step 3), so D, written at step 4, goes on B's bytes, not the lowest ones.
  const std::vector<BufferLifetime> buffers = {
      {1024, 0, 1}, {1024, 1, 3}, {1024, 2, 2}, {1024, 4, 5}};
  const ArenaPlan plan = plan_arena(buffers);
  expect_no_overlap_while_alive(buffers, plan);
  EXPECT_EQ(plan.offsets[2], plan.offsets[0]);
  EXPECT_NE(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[3], plan.offsets[1]);
}

TEST(ArenaPlanTest, EmptyPlan) { EXPECT_EQ(plan_arena({}).bytes, 0u); }

}  // namespace
}  // namespace sf
