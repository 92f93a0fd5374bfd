// slipway llm …: the LLM engine's commands.
#include <CLI/CLI.hpp>

#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
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

// A variant pass's logits against the exact one's, as `key`'s object.
void write_logit_difference(JsonWriter& json, std::string_view key, const llm::LogitDifference& difference) {
  json.key(key).begin_object();
  json.key("positions").value(static_cast<std::uint64_t>(difference.positions));
  json.key("max_abs_logit_difference").value(difference.max_abs_difference);
  json.key("rms_logit_difference").value(difference.rms_difference);
  json.key("logit_rms").value(difference.logit_rms);
  json.key("top1_agreement").value(difference.top1_agreement);
  json.end_object();
}

struct BenchResult : CommandResult {
  std::string model, type;
  std::uint64_t bytes = 0, parameters = 0, bytes_per_token = 0, multiply_adds = 0;
  std::vector<llm::LlmBenchFigure> figures;
  std::vector<std::pair<int, double>> bandwidth, int8_peak;  // per thread count, bytes/s and multiply-adds/s
  std::string kv_cache_type = "f16";
  std::optional<llm::LogitDifference> kv_quality;  // a quantized cache's against F32
  std::size_t tensor_parallel = 1;
  std::optional<llm::LogitDifference> tp_quality;  // the split passes' against one rank's
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
    json.end_object();
    json.key("kv_cache_type").value(kv_cache_type);
    if (kv_quality) write_logit_difference(json, "kv_cache_quality", *kv_quality);
    json.key("tensor_parallel_size").value(static_cast<std::uint64_t>(tensor_parallel));
    if (tp_quality) write_logit_difference(json, "tensor_parallel_quality", *tp_quality);
    json.end_object();
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
    if (kv_quality) {
      out << fmt::format(
          "{} KV cache against f32 over {} positions: logits differ by at most {:.4f}, RMS {:.4f} (the logits' RMS "
          "is {:.3f}); the same top token at {:.1f}% of positions\n",
          kv_cache_type, kv_quality->positions, kv_quality->max_abs_difference, kv_quality->rms_difference,
          kv_quality->logit_rms, 100 * kv_quality->top1_agreement);
    }
    if (tp_quality) {
      out << fmt::format(
          "{} ranks against one over {} positions: logits differ by at most {:.2g}, RMS {:.2g} (the logits' RMS is "
          "{:.3f}); the same top token at {:.1f}% of positions\n",
          tensor_parallel, tp_quality->positions, tp_quality->max_abs_difference, tp_quality->rms_difference,
          tp_quality->logit_rms, 100 * tp_quality->top1_agreement);
    }
    for (const auto& [threads, value] : bandwidth) {
      out << fmt::format("read bandwidth, {} thread{}: ", threads, threads == 1 ? "" : "s")
          << (value > 0 ? fmt::format("{:.1f} GB/s\n", value / 1e9)
                        : std::string("not measured (no AVX2, or no memory for the buffer)\n"));
    }
  }
};

struct LlmServingAddress : CommandResult {
  std::string host, model;
  int port = 0;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("host").value(host).key("port").value(static_cast<std::int64_t>(port));
    json.key("model").value(model).end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "serving " << model << " on http://" << host << ":" << port
        << " (OpenAI API under /v1, metrics at /metrics)\n";
  }
};

struct QuantizeResult : CommandResult {
  std::string in, out, type;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("in").value(in).key("out").value(out).key("type").value(type);
    json.key("bytes_in").value(bytes_in).key("bytes_out").value(bytes_out).key("seconds").value(seconds).end_object();
  }
  void write_text(std::ostream& out_stream) const override {
    out_stream << fmt::format("wrote {} ({}): {:.1f} MB from {:.1f} MB in {:.1f} s\n", out, type,
                              static_cast<double>(bytes_out) / 1e6, static_cast<double>(bytes_in) / 1e6, seconds);
  }
};

}  // namespace

int run_llm_quantize(const GlobalOptions& global, const std::string& in, const std::string& out,
                     const std::string& type_name) {
  llm::TensorType type{};
  if (!llm::tensor_type_by_name(type_name, type))
    return fail(invalid_argument("--type must be q8_0, q4_0, q4_k, f16 or bf16"));
  auto start = std::chrono::steady_clock::now();
  int reported = -1;
  // Progress on stderr in tenths, so a multi-gigabyte model shows it is moving.
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    int tenth = total == 0 ? 10 : static_cast<int>(done * 10 / total);
    if (tenth == reported) return;
    reported = tenth;
    std::cerr << fmt::format("quantizing {}: {}%\n", in, tenth * 10);
  };
  if (auto status = llm::quantize_model(in, out, type, progress); !status.ok()) return fail(status);
  QuantizeResult result;
  result.in = in;
  result.out = out;
  result.type = std::string(llm::tensor_type_info(type)->name);
  std::error_code error;
  result.bytes_in = static_cast<std::uint64_t>(std::filesystem::file_size(in, error));
  result.bytes_out = static_cast<std::uint64_t>(std::filesystem::file_size(out, error));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return render(global, result);
}

int run_llm_serve(const GlobalOptions& global, const LlmServeFlags& flags) {
  auto file = llm::GgufFile::open(flags.model);
  if (!file.ok()) return fail(file.status());
  auto tokenizer = llm::Tokenizer::from_gguf(*file);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto model = llm::LlamaModel::from_file(std::move(*file));
  if (!model.ok()) return fail(model.status());
  llm::EngineOptions engine_options = flags.engine;
  llm::SpeculativeOptions& speculative = engine_options.speculative;
  if (flags.speculative == "ngram") speculative.method = llm::SpeculativeMethod::kNgram;
  if (flags.speculative == "draft") {
    if (flags.draft_model.empty()) return fail(invalid_argument("--speculative draft needs --draft-model FILE"));
    auto draft = llm::LlamaModel::open(flags.draft_model);
    if (!draft.ok()) return fail(draft.status());
    speculative.method = llm::SpeculativeMethod::kDraft;
    speculative.draft = *draft;
  }
  auto engine = llm::Engine::start(*model, std::move(*tokenizer), engine_options);
  if (!engine.ok()) return fail(engine.status());
  std::string name = flags.name.empty() ? std::filesystem::path(flags.model).stem().string() : flags.name;
  const std::size_t context = (*engine)->context();
  // The server `slipway serve` runs, over a scratch workspace (empty: this file is all it serves,
  // and nothing is written where the user works). The API key is a token of it, with every right
  // there is on this server (/metrics is an admin route).
  std::error_code no_temp;
  std::filesystem::path temp = std::filesystem::temp_directory_path(no_temp);
  if (no_temp) return fail(io_error("no temporary folder for the server's scratch workspace: " + no_temp.message()));
  std::filesystem::path scratch = temp / ("slipway-llm-serve-" + random_hex(8));
  struct RemoveScratch {
    std::filesystem::path path;
    ~RemoveScratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_scratch{scratch};
  auto workspace = registry::Registry::open(scratch.string(), true);
  if (!workspace.ok()) return fail(workspace.status());
  serve::ServerOptions options;
  options.http.host = flags.host;
  options.http.port = static_cast<std::uint16_t>(flags.port);
  options.http.io_threads = flags.io_threads;
  options.http.max_connections = flags.max_connections;
  options.http.max_body_bytes = std::size_t{8} << 20;
  options.llms.push_back(
      {name, std::shared_ptr<llm::Engine>(std::move(*engine)), static_cast<std::int64_t>(std::time(nullptr))});
  if (!flags.api_key.empty()) {
    options.service.configured_tokens.push_back({"api-key", sha256_hex(flags.api_key), serve::Role::kAdmin});
  }
  auto server = serve::Server::start(**workspace, options);
  if (!server.ok()) return fail(server.status());
  options.llms.clear();  // the server holds the engine: it stops with the server
  const llm::LlamaConfig& config = (*model)->config();
  log_info(fmt::format("{}: {} layers, width {}, context {} per sequence, {} sequence(s) at once{}", flags.model,
                       config.layers, config.embedding, context, flags.engine.max_sequences,
                       flags.api_key.empty() ? "" : ", API key required"));
  LlmServingAddress address;
  address.host = flags.host;
  address.port = (*server)->port();
  address.model = name;
  render(global, address);
  std::cout.flush();
  (*server)->run();
  server->reset();  // answers what is still queued, stops the engine, then closes the connections
  log_info("server stopped");
  return 0;
}

namespace {

struct CudaBenchResult : CommandResult {
  std::string model;
  llm::CudaBenchReport report;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("device").begin_object();
    json.key("name").value(report.device.name).key("memory_bytes").value(report.device.memory_bytes);
    json.key("bandwidth_bytes_per_second").value(report.device.bandwidth);
    json.key("compute_capability").value(static_cast<std::int64_t>(report.device.compute_capability));
    json.end_object().key("weight_bytes_on_device").value(report.weight_bytes);
    write_logit_difference(json, "logits_against_cpu", report.logits);
    json.key("results").begin_array();
    for (const auto& figure : report.figures) {
      json.begin_object().key("test").value(figure.test).key("tokens_per_second").value(figure.tokens_per_second);
      if (figure.limit > 0) {
        json.key("bandwidth_limit_tokens_per_second").value(figure.limit);
        json.key("fraction_of_limit").value(figure.tokens_per_second / figure.limit);
      }
      json.end_object();
    }
    json.end_array().end_object();
  }
  void write_text(std::ostream& out) const override {
    out << fmt::format("{} on {} ({:.1f} GiB, {:.0f} GB/s peak, compute capability {}.{}): {:.1f} MB of weights\n",
                       model, report.device.name, static_cast<double>(report.device.memory_bytes) / (1 << 30),
                       report.device.bandwidth / 1e9, report.device.compute_capability / 10,
                       report.device.compute_capability % 10, static_cast<double>(report.weight_bytes) / 1e6);
    out << fmt::format(
        "logits against the CPU's over {} positions: at most {:.3g} apart, RMS {:.3g} (the logits' RMS is {:.3f}); "
        "the same top token at {:.1f}% of positions\n",
        report.logits.positions, report.logits.max_abs_difference, report.logits.rms_difference,
        report.logits.logit_rms, 100 * report.logits.top1_agreement);
    out << fmt::format("{:<12} {:>12}  {}\n", "test", "tokens/s", "against the bandwidth limit");
    for (const auto& figure : report.figures) {
      out << fmt::format("{:<12} {:>12.1f}  {}\n", figure.test, figure.tokens_per_second,
                         figure.limit > 0 ? fmt::format("{:.0f}% of {:.0f} tokens/s",
                                                        100 * figure.tokens_per_second / figure.limit, figure.limit)
                                          : std::string("-"));
    }
  }
};

int run_llm_bench_cuda(const GlobalOptions& global, const LlmBenchFlags& flags) {
  if (llm::kv_cache_type_is_8_bit(flags.options.kv_cache_type)) {
    return fail(invalid_argument(
        fmt::format("--kv-cache-dtype {}: the CUDA backend keeps its cache in f32; the 8-bit caches are the CPU path's "
                    "(--device cpu)",
                    llm::kv_cache_type_name(flags.options.kv_cache_type))));
  }
  auto model = llm::LlamaModel::open(flags.model);
  if (!model.ok()) return fail(model.status());
  llm::CudaBenchOptions options;
  options.prompt_tokens = flags.options.prompt_tokens;
  options.generated_tokens = flags.options.generated_tokens;
  options.repetitions = flags.options.repetitions;
  options.sequences = flags.sequences;
  options.threads = flags.options.threads.back();
  CudaBenchResult result;
  result.model = flags.model;
  auto report = llm::bench_cuda(*model, options);
  if (!report.ok()) return fail(report.status());
  result.report = std::move(*report);
  render(global, result);
  return 0;
}

}  // namespace

int run_llm_bench(const GlobalOptions& global, const LlmBenchFlags& flags) {
  if (flags.device == "cuda") return run_llm_bench_cuda(global, flags);
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
  result.bytes_per_token =
      llm::decode_bytes_per_token(**model, flags.options.generated_tokens / 2, flags.options.kv_cache_type);
  result.multiply_adds = llm::multiply_adds_per_token(**model, false);
  auto figures = llm::bench_model(*model, flags.options);
  if (!figures.ok()) return fail(figures.status());
  result.figures = std::move(*figures);
  result.kv_cache_type = std::string(llm::kv_cache_type_name(flags.options.kv_cache_type));
  if (flags.options.kv_cache_type != llm::KvCacheType::kF32) {
    auto quality =
        llm::compare_kv_cache(**model, flags.options.kv_cache_type,
                              std::min<std::size_t>(512, (*model)->config().context), flags.options.threads.back());
    if (!quality.ok()) return fail(quality.status());
    result.kv_quality = *quality;
  }
  result.tensor_parallel = flags.options.tensor_parallel;
  if (flags.options.tensor_parallel > 1) {
    auto quality = llm::compare_tensor_parallel(*model, flags.options.tensor_parallel,
                                                std::min<std::size_t>(512, (*model)->config().context),
                                                flags.options.threads.back());
    if (!quality.ok()) return fail(quality.status());
    result.tp_quality = *quality;
  }
  for (int threads : flags.options.threads) {
    if (!flags.skip_bandwidth) {
      std::size_t bytes = flags.bandwidth_mib > 0 ? flags.bandwidth_mib << 20 : result.bytes_per_token;
      result.bandwidth.emplace_back(threads, llm::measure_read_bandwidth(bytes, threads));
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

void add_engine_flags(CLI::App* command, llm::EngineOptions& options, const std::string& prefix) {
  const std::string scope = prefix.empty() ? "" : "Registered LLMs. ";
  command
      ->add_option(fmt::format("--{0}max-num-seqs,--{0}parallel", prefix), options.max_sequences,
                   scope + "Sequences running at once (vLLM's max_num_seqs)")
      ->check(CLI::Range(std::size_t{1}, llm::kMaxEngineSequences))
      ->capture_default_str();
  command
      ->add_option(fmt::format("--{}max-num-batched-tokens", prefix), options.max_batched_tokens,
                   scope + "Tokens per forward pass: each running sequence's next token, then prompt chunks")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      ->add_option(fmt::format("--{}ctx", prefix), options.context,
                   scope + "Tokens per sequence (0: the model's context, at most 4096)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  command
      ->add_option_function<std::uint64_t>(
          fmt::format("--{}kv-cache-mb", prefix), [&options](std::uint64_t mb) { options.kv_cache_bytes = mb << 20; },
          scope +
              "The key/value cache's pool in MiB, committed at start (default: every sequence's whole context, at "
              "most 4096 and half the memory available)")
      ->check(CLI::Range(1, 1 << 24));
  command
      ->add_option_function<std::string>(
          fmt::format("--{}kv-cache-dtype", prefix),
          [&options](const std::string& name) { llm::kv_cache_type_by_name(name, options.kv_cache_type); },
          scope +
              "How keys and values are kept: f16 (the default; also 'auto'), f32, int8 or fp8_e4m3 (also 'fp8'; "
              "the 8-bit types keep a scale per head and position: 1.9x the sequences of f16 in the same memory at "
              "head size 64)")
      ->check(CLI::IsMember({"f16", "f32", "int8", "fp8", "fp8_e4m3", "auto"}));
  command->add_flag_callback(
      fmt::format("--{}no-prefix-caching", prefix), [&options] { options.prefix_caching = false; },
      scope + "Compute every prompt whole, reusing no cached blocks");
  command
      ->add_option(fmt::format("--{0}tensor-parallel-size,--{0}tp", prefix), options.tensor_parallel,
                   scope +
                       "Ranks each forward pass is split over, Megatron-style (heads and hidden units per rank, an "
                       "all-reduce after attention and after the feed-forward); the threads are shared among them")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  if (prefix.empty()) {
    command->add_option("--threads", options.threads, "Threads for the forward pass (0: all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
  }
}

void add_llm_commands(CLI::App& app, LlmCommands& commands) {
  auto* llm_command = app.add_subcommand("llm", "The LLM engine: GGUF Llama models");
  llm_command->require_subcommand(1);
  commands.make_test_model = llm_command->add_subcommand(
      "make-test-model", "Write a random-weight Llama GGUF with a small working tokenizer (for tests and benchmarks)");
  commands.make_test_model->add_option("OUT", commands.test_model.out, "The .gguf file to write")->required();
  commands.make_test_model
      ->add_option("--type", commands.test_model.type, "Matrix weights: f32, f16, bf16, q8_0, q4_0 or q4_k")
      ->capture_default_str();
  commands.make_test_model->add_option("--layers", commands.test_model.shape.layers)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  commands.make_test_model->add_option("--dim", commands.test_model.shape.embedding, "Width (embedding length)")
      ->check(CLI::Range(2, 65536))
      ->capture_default_str();
  commands.make_test_model->add_option("--heads", commands.test_model.shape.heads)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  commands.make_test_model
      ->add_option("--kv-heads", commands.test_model.shape.kv_heads, "Key/value heads (grouped-query attention)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  commands.make_test_model->add_option("--ff", commands.test_model.shape.feed_forward, "Feed-forward width")
      ->check(CLI::Range(1, 262144))
      ->capture_default_str();
  commands.make_test_model->add_option("--vocab", commands.test_model.shape.vocabulary, "Vocabulary size")
      ->check(CLI::Range(400, 1 << 20))
      ->capture_default_str();
  commands.make_test_model->add_option("--context", commands.test_model.shape.context, "Context length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  commands.make_test_model->add_flag("--tied", commands.test_model.shape.tied_output,
                                     "Share the token embedding as the output matrix");
  commands.make_test_model->add_option("--seed", commands.test_model.seed)->capture_default_str();
  commands.make_test_model
      ->add_option(
          "--tokenizer", commands.test_model.shape.tokenizer,
          "llama (SentencePiece), gpt2 (byte-level BPE) or llama3 (BPE with Llama-3's chat tokens and template)")
      ->check(CLI::IsMember({"llama", "gpt2", "llama3"}))
      ->capture_default_str();
  commands.bench = llm_command->add_subcommand(
      "bench", "Prompt (pp) and generation (tg) tokens per second, as llama-bench measures them, with the roofline");
  commands.bench->add_option("MODEL", commands.bench_flags.model, "A GGUF Llama model")->required();
  commands.bench
      ->add_option("--prompt", commands.bench_flags.options.prompt_tokens, "Prompt tokens per pp run (0: skip pp)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  commands.bench
      ->add_option("--generate", commands.bench_flags.options.generated_tokens, "Tokens per tg run (0: skip tg)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  commands.bench
      ->add_option("--repetitions", commands.bench_flags.options.repetitions, "Timed runs per test, after a warm-up")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  commands.bench->add_option("--threads", commands.bench_flags.options.threads, "Thread counts to run, e.g. 1,2")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  commands.bench
      ->add_option("--bandwidth-mib", commands.bench_flags.bandwidth_mib,
                   "Buffer for the read-bandwidth measurement (default: the bytes one decoded token reads, so the "
                   "roofline compares like with like)")
      ->check(CLI::Range(1, 1 << 20));
  commands.bench->add_flag("--no-bandwidth", commands.bench_flags.skip_bandwidth,
                           "Skip the bandwidth measurement and roofline");
  commands.bench
      ->add_option_function<std::string>(
          "--kv-cache-dtype",
          [&options = commands.bench_flags.options](const std::string& name) {
            llm::kv_cache_type_by_name(name, options.kv_cache_type);
          },
          "The KV cache's type for the runs: f16 (the default), f32, int8 or fp8_e4m3 (also 'fp8'; for all but "
          "f32, also its logits against f32's on a 512-token prompt)")
      ->check(CLI::IsMember({"f16", "f32", "int8", "fp8", "fp8_e4m3"}));
  commands.bench
      ->add_option(
          "--device", commands.bench_flags.device,
          "cpu, or cuda: the CUDA backend's logits against the CPU's, pp, tg and decoding --sequences at once, "
          "against the card's bandwidth")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  commands.bench
      ->add_option("--sequences", commands.bench_flags.sequences, "With --device cuda: sequences decoding at once")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  commands.bench
      ->add_option("--tensor-parallel-size,--tp", commands.bench_flags.options.tensor_parallel,
                   "Ranks each pass is split over (then also the logits against one rank's on a 512-token prompt)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();

  commands.quantize = llm_command->add_subcommand(
      "quantize", "Re-encode a GGUF model's matrices (Q8_0, Q4_0, Q4_K, F16, BF16); llama.cpp loads what it writes");
  commands.quantize->add_option("IN", commands.quantize_in, "The GGUF model to read")->required();
  commands.quantize->add_option("OUT", commands.quantize_out, "The GGUF file to write")->required();
  commands.quantize->add_option("--type", commands.quantize_type, "q8_0, q4_0, q4_k, f16 or bf16")->required();

  commands.serve = llm_command->add_subcommand(
      "serve", "Serve a GGUF model with the OpenAI API: /v1/models, /v1/completions, /v1/chat/completions");
  commands.serve->add_option("MODEL", commands.serve_flags.model, "A GGUF Llama model")->required();
  commands.serve->add_option("--name", commands.serve_flags.name,
                             "The model id requests name (default: the file's stem)");
  commands.serve->add_option("--host", commands.serve_flags.host)->capture_default_str();
  commands.serve->add_option("--port", commands.serve_flags.port, "0 picks a free port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  add_engine_flags(commands.serve, commands.serve_flags.engine, "");
  llm::SpeculativeOptions& speculative = commands.serve_flags.engine.speculative;
  commands.serve
      ->add_option("--speculative", commands.serve_flags.speculative,
                   "Speculative decoding: 'ngram' (prompt lookup in each sequence's own tokens) or 'draft' (a draft "
                   "model proposes, see --draft-model); greedy output is unchanged, sampled output keeps its "
                   "distribution")
      ->check(CLI::IsMember({"ngram", "draft"}));
  commands.serve->add_option("--draft-model", commands.serve_flags.draft_model,
                             "A smaller GGUF model with the same vocabulary (or the model quantized harder)");
  commands.serve->add_option("--num-speculative-tokens", speculative.tokens, "Tokens proposed per sequence and step")
      ->check(CLI::Range(std::size_t{1}, llm::kMaxSpeculativeTokens))
      ->capture_default_str();
  commands.serve->add_option("--prompt-lookup-max", speculative.lookup_max, "ngram: the longest suffix looked up")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  commands.serve->add_option("--prompt-lookup-min", speculative.lookup_min, "ngram: the shortest suffix looked up")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  commands.serve
      ->add_option("--max-waiting", commands.serve_flags.engine.max_waiting,
                   "Requests queued for a free sequence; more are answered 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  commands.serve
      ->add_option("--max-connections", commands.serve_flags.max_connections,
                   "Open connections (0: from the file limit)")
      ->check(CLI::Range(0, 1 << 24));
  commands.serve
      ->add_option("--api-key", commands.serve_flags.api_key,
                   "Require 'Authorization: Bearer KEY' (also from SLIPWAY_API_KEY)")
      ->envname("SLIPWAY_API_KEY");
  add_llm_bench_serve_command(llm_command, commands.run_bench_serve);
}

std::optional<int> run_llm_command(const GlobalOptions& global, const LlmCommands& commands) {
  if (commands.make_test_model->parsed()) return run_llm_make_test_model(global, commands.test_model);
  if (commands.bench->parsed()) return run_llm_bench(global, commands.bench_flags);
  if (commands.serve->parsed()) return run_llm_serve(global, commands.serve_flags);
  if (auto code = commands.run_bench_serve(global)) return code;
  if (commands.quantize->parsed()) {
    return run_llm_quantize(global, commands.quantize_in, commands.quantize_out, commands.quantize_type);
  }
  return std::nullopt;
}

}  // namespace slipway::cli
