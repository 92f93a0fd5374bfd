// The CUDA backend: where it is not built or there is no device, every entry answers Unavailable
// with the reason; where a device is there, its logits follow the CPU's.
#include <gtest/gtest.h>

#include <filesystem>

#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

TEST(CudaForward, AnswersUnavailableWithTheReasonOrFollowsTheCpu) {
  testing::TempDir dir;
  const std::string path = dir.file("model.gguf");
  ASSERT_TRUE(write_test_model(TestModelShape{}, TensorType::kF16, 5, path).ok());
  auto model = LlamaModel::open(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto device = cuda_device();
  auto gpu = CudaForward::create(*model, 2, 64);
  CudaBenchOptions options;
  options.prompt_tokens = 32;
  options.generated_tokens = 8;
  options.check_tokens = 32;
  options.sequences = {1, 2};
  options.repetitions = 1;
  auto report = bench_cuda(*model, options);
  if (!device.ok()) {
    EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(device.status().message().find(cuda_built() ? "no CUDA device" : "built without CUDA"), std::string::npos)
        << device.status().message();
    // With no driver at all, the reason is the missing GPU, not the runtime's "driver version is
    // insufficient".
    std::error_code ignored;
    if (cuda_built() && !std::filesystem::exists("/dev/nvidiactl", ignored)) {
      EXPECT_NE(device.status().message().find("no NVIDIA GPU found"), std::string::npos) << device.status().message();
    }
    EXPECT_EQ(gpu.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(report.status().code(), StatusCode::kUnavailable);
    GTEST_SKIP() << "no GPU here: " << device.status().message();
  }
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  // A token outside the pass's room, or past a gap in its sequence, is refused before any launch.
  std::vector<float> logits;
  for (const BatchToken& refused : {BatchToken{2, 0, 1}, BatchToken{0, 5, 1}}) {
    EXPECT_EQ((*gpu)->forward(std::span(&refused, 1), {true}, logits).code(), StatusCode::kInvalidArgument);
  }
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_GE(report->logits.top1_agreement, 0.95);  // float sums in another order: a near-tie may flip
  EXPECT_LT(report->logits.max_abs_difference, 1e-3 * (1 + report->logits.logit_rms));
  EXPECT_EQ(report->figures.size(), 3u);  // pp32, tg8, decode x2
}

}  // namespace
}  // namespace slipway::llm
