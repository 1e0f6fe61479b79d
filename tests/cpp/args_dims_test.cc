// Args::<output>_dim(i) and <workspace>_dim(i): each dimension as the bindings
// size the tensor (the batch's product first where it has '...'), from the
// symbols and attributes in Args, so that a body restates no size expression.
#include <gtest/gtest.h>

#include "opgen_ops/paged_attention_decode.h"
#include "opgen_ops/rms_norm.h"
#include "opgen_ops/topk_softmax.h"

namespace {

TEST(ArgsDims, AnOutputSizedByAnAttribute) {
  opgen_ops::topk_softmax::Args<float> args{};
  args.N = 7;
  args.E = 64;
  args.topk = 3;
  EXPECT_EQ(args.topk_weights_dim(0), 7);
  EXPECT_EQ(args.topk_weights_dim(1), 3);
  EXPECT_EQ(args.topk_indices_dim(1), 3);
}

TEST(ArgsDims, ABatchedOutputLeadsWithTheBatchsProduct) {
  opgen_ops::rms_norm::Args<float> args{};
  args.batch = 12;
  args.D = 4096;
  EXPECT_EQ(args.out_dim(0), 12);
  EXPECT_EQ(args.out_dim(1), 4096);
  EXPECT_EQ(args.rstd_dim(0), 12);
}

TEST(ArgsDims, OutputsAndWorkspacesBeside) {
  opgen_ops::paged_attention_decode::Args<float, float> args{};
  args.S = 5;
  args.H = 8;
  args.Dh = 64;
  args.MB = 3;
  args.BS = 100;  // 300 tokens: two partitions of 256
  EXPECT_EQ(args.out_dim(0), 5);
  EXPECT_EQ(args.out_dim(1), 8);
  EXPECT_EQ(args.out_dim(2), 64);
  EXPECT_EQ(args.partial_out_dim(2), 2);
  EXPECT_EQ(args.partial_out_dim(3), 64);
}

}  // namespace
