// slipway llm …: the LLM engine's commands.
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

struct BenchResult : CommandResult {
  std::string model, type;
  std::uint64_t bytes = 0, parameters = 0, bytes_per_token = 0, multiply_adds = 0;
  std::vector<llm::LlmBenchFigure> figures;
  std::vector<std::pair<int, double>> bandwidth, int8_peak;  // per thread count, bytes/s and multiply-adds/s
  double limit(const std::vector<std::pair<int, double>>& values, int threads) const {
    for (const auto& [count, value] : values) {
      if (count == threads) return value;
    }
    return 0;
  }
  // tg's roofline: tokens per second were every byte read at the measured bandwidth; pp's
  // figure: integer operations (2 per multiply-add) per second.
  double roofline(int threads) const {
    return bytes_per_token == 0 ? 0 : limit(bandwidth, threads) / static_cast<double>(bytes_per_token);
  }
  double gops(const llm::LlmBenchFigure& figure) const {
    return 2.0 * static_cast<double>(multiply_adds) * figure.tokens_per_second / 1e9;
  }
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("type").value(type);
    json.key("bytes").value(bytes).key("parameters").value(parameters);
    json.key("decode_bytes_per_token").value(bytes_per_token);
    json.key("results").begin_array();
    for (const auto& figure : figures) {
      json.begin_object()
          .key("test")
          .value(figure.test)
          .key("threads")
          .value(static_cast<std::int64_t>(figure.threads));
      json.key("tokens_per_second").value(figure.tokens_per_second).key("deviation").value(figure.deviation);
      if (figure.test.starts_with("tg")) {
        double line = roofline(figure.threads);
        json.key("roofline_tokens_per_second").value(line);
        json.key("fraction_of_roofline").value(line > 0 ? figure.tokens_per_second / line : 0.0);
      } else {
        double peak = 2.0 * limit(int8_peak, figure.threads) / 1e9;
        json.key("gops").value(gops(figure)).key("int8_peak_gops").value(peak);
      }
      json.end_object();
    }
    json.end_array();
    json.key("read_bandwidth").begin_object();
    for (const auto& [threads, value] : bandwidth) json.key(std::to_string(threads)).value(value);
    json.end_object().end_object();
  }
  void write_text(std::ostream& out) const override {
    out << fmt::format("{}: {} weights, {:.1f} MB, {:.1f}M parameters; decoding reads {:.1f} MB per token\n", model,
                       type, static_cast<double>(bytes) / 1e6, static_cast<double>(parameters) / 1e6,
                       static_cast<double>(bytes_per_token) / 1e6);
    out << fmt::format("{:<8} {:>7} {:>20}  {}\n", "test", "threads", "tokens/s", "against the limit");
    for (const auto& figure : figures) {
      std::string against;
      if (figure.test.starts_with("tg") && roofline(figure.threads) > 0) {
        against = fmt::format("{:.0f}% of the {:.1f} tokens/s roofline",
                              100 * figure.tokens_per_second / roofline(figure.threads), roofline(figure.threads));
      } else if (figure.test.starts_with("pp")) {
        double peak = 2.0 * limit(int8_peak, figure.threads) / 1e9;
        against = peak > 0 ? fmt::format("{:.0f} GOP/s, {:.0f}% of the int8 peak {:.0f}", gops(figure),
                                         100 * gops(figure) / peak, peak)
                           : fmt::format("{:.0f} GOP/s", gops(figure));
      }
      out << fmt::format("{:<8} {:>7} {:>11.2f} ± {:<6.2f}  {}\n", figure.test, figure.threads,
                         figure.tokens_per_second, figure.deviation, against);
    }
    for (const auto& [threads, value] : bandwidth) {
      out << fmt::format("read bandwidth, {} thread{}: {:.1f} GB/s\n", threads, threads == 1 ? "" : "s", value / 1e9);
    }
  }
};

}  // namespace

int run_llm_bench(const GlobalOptions& global, const LlmBenchFlags& flags) {
  auto model = llm::LlamaModel::open(flags.model);
  if (!model.ok()) return fail(model.status());
  BenchResult result;
  result.model = flags.model;
  const llm::WeightMatrix& query = (*model)->layers().front().query;
  result.type = std::string(llm::tensor_type_info(query.type)->name);
  std::error_code error;
  result.bytes = static_cast<std::uint64_t>(std::filesystem::file_size(flags.model, error));
  for (const auto& tensor : (*model)->file().tensors()) result.parameters += tensor.elements();
  // tg's tokens see, on average, half the run's positions.
  result.bytes_per_token = llm::decode_bytes_per_token(**model, flags.options.generated_tokens / 2);
  result.multiply_adds = llm::multiply_adds_per_token(**model, false);
  auto figures = llm::bench_model(**model, flags.options);
  if (!figures.ok()) return fail(figures.status());
  result.figures = std::move(*figures);
  for (int threads : flags.options.threads) {
    if (flags.bandwidth_mib > 0) {
      result.bandwidth.emplace_back(threads, llm::measure_read_bandwidth(flags.bandwidth_mib << 20, threads));
    }
    result.int8_peak.emplace_back(threads, llm::measure_int8_peak(threads));
  }
  return render(global, result);
}

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
