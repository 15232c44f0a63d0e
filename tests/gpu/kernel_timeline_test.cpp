// kernel_timeline_test.cpp: the exposed-time split of a traced step and the short kernel names
// (gpu/kernel_timeline.h), on hand-made records: no GPU needed.
#include "gpu/kernel_timeline.h"

#include <gtest/gtest.h>

#include <numeric>

namespace dsv4::gpu {
namespace {

KernelRecord rec(const char* name, uint64_t start, uint64_t end, int gx = 1, uint32_t stream = 7) {
  KernelRecord r;
  r.name = name;
  r.grid = {gx, 1, 1};
  r.block = {128, 1, 1};
  r.stream = stream;
  r.start_ns = start;
  r.end_ns = end;
  return r;
}

TEST(KernelTimeline, ShortNamesDropReturnTypeNamespacesAndParameters) {
  // Itanium-mangled names as nvcc and g++ write them (an anonymous namespace, an enum argument).
  EXPECT_EQ(short_kernel_name("_ZN4dsv44cuda12_GLOBAL__N_119mix_partials_kernelILi24ELi32ELb1EEEvNS1_15MixPartialsArgsE"),
            "mix_partials_kernel<24, 32, true>");
  EXPECT_EQ(short_kernel_name("_ZN4dsv44cuda19w4a16_decode_kernelILi1ELNS0_3EpiE1EEEvPKfi"),
            "w4a16_decode_kernel<1, (Epi)1>");
  // Already readable names pass through; a plain C-style name has nothing to drop.
  EXPECT_EQ(short_kernel_name("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT"), "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT");
  EXPECT_EQ(short_kernel_name("void ns::k<2>(int)"), "k<2>");
  // Not demangleable: kept as given rather than lost.
  EXPECT_EQ(short_kernel_name("_Zgarbage"), "_Zgarbage");
}

TEST(KernelTimeline, ExposedTimesSumToTheSpan) {
  // GPU clock in us: a 1..11; b starts early (PDL) at 8 and ends at 14: exposed 3, lead -3; c runs
  // beside b on another stream (9..12): exposed 0; d starts after a gap at 16 and ends at 20:
  // exposed 6, lead 2. Given out of order; times come back relative to a's start.
  std::vector<KernelRecord> r = {rec("d", 16000, 20000), rec("b", 8000, 14000), rec("a", 1000, 11000),
                                 rec("c", 9000, 12000, 1, 9)};
  const StepTimeline t = step_timeline(r);
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0].name, "a");
  EXPECT_EQ(t.rows[1].name, "b");
  EXPECT_EQ(t.rows[2].name, "c");
  EXPECT_EQ(t.rows[3].name, "d");
  EXPECT_DOUBLE_EQ(t.rows[0].start_us, 0.0);
  EXPECT_DOUBLE_EQ(t.rows[0].exposed_us, 10.0);
  EXPECT_DOUBLE_EQ(t.rows[1].exposed_us, 3.0);   // 14 - 11
  EXPECT_DOUBLE_EQ(t.rows[1].lead_us, -3.0);     // started at 8, a ended at 11
  EXPECT_DOUBLE_EQ(t.rows[2].exposed_us, 0.0);   // ended at 12, inside b
  EXPECT_EQ(t.rows[2].stream, 9u);
  EXPECT_DOUBLE_EQ(t.rows[3].exposed_us, 6.0);   // 20 - 14
  EXPECT_DOUBLE_EQ(t.rows[3].lead_us, 2.0);      // a gap of 2 us after b
  EXPECT_DOUBLE_EQ(t.span_us, 19.0);
  double sum = 0;
  for (const TimelineRow& row : t.rows) sum += row.exposed_us;
  EXPECT_DOUBLE_EQ(sum, t.span_us);
}

TEST(KernelTimeline, GroupsByNameAndGridLargestExposedFirst) {
  // Two launches of k at grid 4 (exposed 2 + 3), one of k at grid 8 (exposed 1), one of m (4).
  std::vector<KernelRecord> r = {rec("k", 0, 2000, 4), rec("m", 2000, 6000, 1), rec("k", 6000, 9000, 4),
                                 rec("k", 9000, 10000, 8)};
  const StepTimeline t = step_timeline(r);
  ASSERT_EQ(t.groups.size(), 3u);
  EXPECT_EQ(t.groups[0].key, "k (4,1,1)");
  EXPECT_EQ(t.groups[0].count, 2);
  EXPECT_DOUBLE_EQ(t.groups[0].exposed_us, 5.0);
  EXPECT_DOUBLE_EQ(t.groups[0].duration_us, 5.0);
  EXPECT_EQ(t.groups[1].key, "m (1,1,1)");
  EXPECT_DOUBLE_EQ(t.groups[1].exposed_us, 4.0);
  EXPECT_EQ(t.groups[2].key, "k (8,1,1)");
  EXPECT_DOUBLE_EQ(t.groups[2].exposed_us, 1.0);
}

TEST(KernelTimeline, EmptyStepAndMedian) {
  const StepTimeline empty = step_timeline({});
  EXPECT_TRUE(empty.rows.empty());
  EXPECT_DOUBLE_EQ(empty.span_us, 0.0);
  EXPECT_EQ(median_step({}), -1);
  std::vector<StepTimeline> steps(4);
  const double spans[4] = {30, 10, 40, 20};
  for (int i = 0; i < 4; ++i) steps[size_t(i)].span_us = spans[i];
  EXPECT_EQ(median_step(steps), 3);  // sorted 10, 20, 30, 40: the lower middle is 20 (index 3)
  steps.pop_back();                  // 30, 10, 40: the middle is 30 (index 0)
  EXPECT_EQ(median_step(steps), 0);
}

}  // namespace
}  // namespace dsv4::gpu
