// slipway llm …: the LLM engine's commands (make-test-model for now).
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/llm.h"

namespace slipway::cli {
namespace {

struct TestModelResult : CommandResult {
  std::string path, type;
  llm::TestModelShape shape;
  std::size_t bytes = 0;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("path").value(path).key("type").value(type);
    json.key("layers").value(static_cast<std::uint64_t>(shape.layers));
    json.key("embedding").value(static_cast<std::uint64_t>(shape.embedding));
    json.key("heads").value(static_cast<std::uint64_t>(shape.heads));
    json.key("kv_heads").value(static_cast<std::uint64_t>(shape.kv_heads));
    json.key("feed_forward").value(static_cast<std::uint64_t>(shape.feed_forward));
    json.key("vocabulary").value(static_cast<std::uint64_t>(shape.vocabulary));
    json.key("context").value(static_cast<std::uint64_t>(shape.context));
    json.key("bytes").value(static_cast<std::uint64_t>(bytes)).end_object();
  }
  void write_text(std::ostream& out) const override {
    out << fmt::format(
        "wrote {} ({:.1f} MB): {} layers, width {}, {} heads ({} key/value), feed-forward {}, "
        "vocabulary {}, context {}, {} weights\n",
        path, static_cast<double>(bytes) / 1e6, shape.layers, shape.embedding, shape.heads, shape.kv_heads,
        shape.feed_forward, shape.vocabulary, shape.context, type);
  }
};

}  // namespace

int run_llm_make_test_model(const GlobalOptions& global, const LlmTestModelFlags& flags) {
  llm::TensorType type{};
  if (!llm::tensor_type_by_name(flags.type, type) || !llm::supported_weight_type(type)) {
    return fail(invalid_argument("--type must be f32, f16, bf16, q8_0, q4_0 or q4_k"));
  }
  if (auto status = llm::write_test_model(flags.shape, type, flags.seed, flags.out); !status.ok()) return fail(status);
  TestModelResult result;
  result.path = flags.out;
  result.type = std::string(llm::tensor_type_info(type)->name);
  result.shape = flags.shape;
  std::error_code error;
  result.bytes = static_cast<std::size_t>(std::filesystem::file_size(flags.out, error));
  return render(global, result);
}

}  // namespace slipway::cli
