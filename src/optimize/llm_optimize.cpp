// slipway optimize for a GGUF model: candidates that each change one serving choice, measured
// under one closed-loop load against TTFT/ITL objectives and a cost per 1,000 output tokens.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>

#include <stdlib.h>

#include "slipway/optimize.h"

namespace slipway::optimize {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kQualityPromptTokens = 256;

double milliseconds(Clock::duration duration) { return std::chrono::duration<double, std::milli>(duration).count(); }

LlmLatency summarize(std::vector<double> values) {
  LlmLatency latency;
  if (values.empty()) return latency;
  std::sort(values.begin(), values.end());
  auto at = [&](double quantile) {
    return values[std::min(values.size() - 1, static_cast<std::size_t>(quantile * static_cast<double>(values.size())))];
  };
  latency.p50 = at(0.50);
  latency.p95 = at(0.95);
  latency.p99 = at(0.99);
  double sum = 0;
  for (double value : values) sum += value;
  latency.mean = sum / static_cast<double>(values.size());
  return latency;
}

double statistic(const LlmLatency& latency, const std::string& name) {
  if (name == "p50") return latency.p50;
  if (name == "p95") return latency.p95;
  if (name == "p99") return latency.p99;
  return latency.mean;
}

// The same prompts for every candidate: random token ids of the model's vocabulary.
std::vector<std::vector<std::int32_t>> make_prompts(std::size_t count, std::size_t length, std::size_t vocabulary) {
  std::mt19937 random(20261202);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocabulary) - 1);
  std::vector<std::vector<std::int32_t>> prompts(count, std::vector<std::int32_t>(length));
  for (auto& prompt : prompts) {
    for (auto& id : prompt) id = token(random);
  }
  return prompts;
}

struct LoadFigures {
  double output_tokens_per_second = 0;
  LlmLatency time_to_first_token, inter_token_latency;
  std::size_t completed = 0;
  std::string error;
};

// `clients` closed-loop clients: each sends its next prompt as soon as its last one finishes,
// until every prompt is sent. Greedy, end tokens ignored, so each output has its full length.
LoadFigures run_load(llm::Engine& engine, const std::vector<std::vector<std::int32_t>>& prompts, std::size_t clients,
                     std::size_t output_tokens) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t in_flight = 0, completed = 0, tokens = 0;
    std::vector<double> first_token_ms, gaps_ms;
    std::string error;
  } shared;
  shared.gaps_ms.reserve(prompts.size() * output_tokens);
  const Clock::time_point start = Clock::now();
  for (std::size_t next = 0; next < prompts.size(); ++next) {
    {
      std::unique_lock lock(shared.mutex);
      shared.changed.wait(lock, [&] { return shared.in_flight < clients; });
      ++shared.in_flight;
    }
    llm::GenerationRequest request;
    request.prompt = prompts[next];
    request.max_tokens = output_tokens;
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    auto sent = std::make_shared<Clock::time_point>(Clock::now());
    auto last = std::make_shared<std::optional<Clock::time_point>>();
    request.on_token = [&shared, sent, last](const llm::GenerationEvent&) {
      const Clock::time_point now = Clock::now();
      std::lock_guard lock(shared.mutex);
      if (*last) {
        shared.gaps_ms.push_back(milliseconds(now - **last));
      } else {
        shared.first_token_ms.push_back(milliseconds(now - *sent));
      }
      *last = now;
      ++shared.tokens;
      return true;
    };
    request.on_finish = [&shared](const llm::GenerationResult& result) {
      std::lock_guard lock(shared.mutex);
      --shared.in_flight;
      if (result.reason == llm::FinishReason::kLength) {
        ++shared.completed;
      } else if (shared.error.empty()) {
        shared.error = result.error.empty() ? "a request did not finish by length" : result.error;
      }
      shared.changed.notify_all();
    };
    if (Status status = engine.submit(std::move(request)); !status.ok()) {
      std::lock_guard lock(shared.mutex);
      --shared.in_flight;
      if (shared.error.empty()) shared.error = status.message();
    }
  }
  std::unique_lock lock(shared.mutex);
  shared.changed.wait(lock, [&] { return shared.in_flight == 0; });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  LoadFigures figures;
  figures.output_tokens_per_second = seconds > 0 ? static_cast<double>(shared.tokens) / seconds : 0;
  figures.time_to_first_token = summarize(std::move(shared.first_token_ms));
  figures.inter_token_latency = summarize(std::move(shared.gaps_ms));
  figures.completed = shared.completed;
  figures.error = shared.error;
  return figures;
}

// A candidate before it is measured: its file, its engine options, and how it was built.
struct Plan {
  LlmCandidateResult result;
  std::string model_path;
  llm::EngineOptions engine;
  // The logits against the baseline's (null: the candidate's arithmetic is the baseline's).
  std::function<Result<llm::LogitDifference>(const std::shared_ptr<const llm::LlamaModel>& baseline,
                                             const std::shared_ptr<const llm::LlamaModel>& model)>
      quality;
};

std::string serve_flags(const std::map<std::string, std::string>& settings) {
  std::string flags;
  for (const auto& [flag, value] : settings) {
    if (flag == "quantize") continue;
    flags += (flags.empty() ? "" : " ") + flag + " " + value;
  }
  return flags;
}

Plan plan(std::string name, std::string technique, std::map<std::string, std::string> settings,
          const LlmOptimizeOptions& options) {
  Plan candidate;
  candidate.result.name = std::move(name);
  candidate.result.technique = std::move(technique);
  candidate.result.settings = std::move(settings);
  candidate.result.serve_flags = serve_flags(candidate.result.settings);
  candidate.result.changes = candidate.result.technique == "baseline" ? 0 : 1;
  candidate.model_path = options.model_path;
  candidate.result.model_path = options.model_path;
  candidate.engine = options.engine;
  candidate.engine.threads = options.threads;
  return candidate;
}

Result<std::vector<Plan>> plan_candidates(const LlmOptimizeOptions& options, const std::string& work_dir,
                                          const llm::LlamaModel& baseline) {
  std::vector<Plan> plans;
  plans.push_back(plan("baseline", "baseline", {}, options));
  const llm::TensorType baseline_type = baseline.layers().front().query.type;
  for (const std::string& technique : options.techniques) {
    if (technique == "quantize") {
      for (const char* type_name : {"q8_0", "q4_k", "q4_0"}) {
        llm::TensorType type{};
        llm::tensor_type_by_name(type_name, type);
        if (type == baseline_type) continue;
        const std::string path =
            (std::filesystem::path(work_dir) /
             fmt::format("{}-{}.gguf", std::filesystem::path(options.model_path).stem().string(), type_name))
                .string();
        Plan candidate = plan(fmt::format("quantize:{}", type_name), technique, {{"quantize", type_name}}, options);
        candidate.model_path = path;
        candidate.result.model_path = path;
        candidate.quality = [](const auto& exact, const auto& model) {
          return llm::compare_models(*exact, *model, llm::KvCacheType::kF32, kQualityPromptTokens, 0);
        };
        plans.push_back(std::move(candidate));
      }
    } else if (technique == "kv") {
      for (llm::KvCacheType type : {llm::KvCacheType::kInt8, llm::KvCacheType::kFp8E4M3}) {
        if (options.engine.kv_cache_type == type) continue;
        const std::string name(llm::kv_cache_type_name(type));
        Plan candidate = plan("kv:" + name, technique, {{"--kv-cache-dtype", name}}, options);
        candidate.engine.kv_cache_type = type;
        candidate.quality = [type](const auto& exact, const auto&) {
          return llm::compare_kv_cache(*exact, type, kQualityPromptTokens, 0);
        };
        plans.push_back(std::move(candidate));
      }
    } else if (technique == "speculative") {
      if (options.engine.speculative.method != llm::SpeculativeMethod::kNone) continue;
      Plan candidate = plan("speculative:ngram", technique, {{"--speculative", "ngram"}}, options);
      candidate.engine.speculative.method = llm::SpeculativeMethod::kNgram;
      plans.push_back(std::move(candidate));
    } else if (technique == "batching") {
      const std::size_t half = std::max<std::size_t>(2, options.clients / 2);
      for (std::size_t sequences : {std::size_t{1}, half}) {
        if (sequences >= std::min(options.engine.max_sequences, options.clients)) continue;
        Plan candidate = plan(fmt::format("batching:seqs={}", sequences), technique,
                              {{"--max-num-seqs", std::to_string(sequences)}}, options);
        candidate.engine.max_sequences = sequences;
        plans.push_back(std::move(candidate));
      }
      for (std::size_t tokens : {std::size_t{128}, std::size_t{2048}}) {
        if (tokens == options.engine.max_batched_tokens || tokens < options.engine.max_sequences) continue;
        Plan candidate = plan(fmt::format("batching:tokens={}", tokens), technique,
                              {{"--max-num-batched-tokens", std::to_string(tokens)}}, options);
        candidate.engine.max_batched_tokens = tokens;
        plans.push_back(std::move(candidate));
      }
    } else if (technique == "tensor-parallel") {
      Plan candidate = plan("tensor-parallel:2", technique, {{"--tensor-parallel-size", "2"}}, options);
      candidate.engine.tensor_parallel = 2;
      candidate.quality = [threads = options.threads](const auto& exact, const auto&) {
        return llm::compare_tensor_parallel(exact, 2, kQualityPromptTokens, threads);
      };
      plans.push_back(std::move(candidate));
    } else {
      return invalid_argument("unknown LLM candidate technique '" + technique +
                              "'; known: quantize, kv, speculative, batching, tensor-parallel");
    }
  }
  return plans;
}

// Builds (a quantized file), loads, checks and measures one candidate into its result.
Status measure(Plan& candidate, const std::shared_ptr<const llm::LlamaModel>& baseline,
               const std::vector<std::vector<std::int32_t>>& prompts, const LlmOptimizeOptions& options) {
  LlmCandidateResult& result = candidate.result;
  if (candidate.model_path != options.model_path) {
    llm::TensorType type{};
    llm::tensor_type_by_name(result.settings.at("quantize"), type);
    SLIPWAY_RETURN_IF_ERROR(llm::quantize_model(options.model_path, candidate.model_path, type));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto file, llm::GgufFile::open(candidate.model_path));
  SLIPWAY_ASSIGN_OR_RETURN(auto tokenizer, llm::Tokenizer::from_gguf(file));
  SLIPWAY_ASSIGN_OR_RETURN(std::shared_ptr<const llm::LlamaModel> model, llm::LlamaModel::from_file(std::move(file)));
  for (const auto& tensor : model->file().tensors()) result.weight_bytes += tensor.bytes;
  if (candidate.quality) {
    SLIPWAY_ASSIGN_OR_RETURN(llm::LogitDifference difference, candidate.quality(baseline, model));
    result.max_logit_difference = difference.max_abs_difference;
    result.rms_logit_difference = difference.rms_difference;
    result.top1_agreement = difference.top1_agreement;
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto engine, llm::Engine::start(model, tokenizer, candidate.engine));
  result.kv_cache_bytes =
      engine->stats().kv_blocks * llm::KvCache::block_bytes(model->config(), candidate.engine.kv_cache_type);
  // A round of short requests first: the pool's first pages and the threads' first loops are not
  // the candidate's steady state.
  const std::size_t warm_up = std::min(options.clients, prompts.size());
  run_load(*engine, {prompts.begin(), prompts.begin() + static_cast<std::ptrdiff_t>(warm_up)}, warm_up, 4);
  LoadFigures figures = run_load(*engine, prompts, options.clients, options.output_tokens);
  if (!figures.error.empty()) return internal_error("the load failed: " + figures.error);
  result.output_tokens_per_second = figures.output_tokens_per_second;
  result.time_to_first_token = figures.time_to_first_token;
  result.inter_token_latency = figures.inter_token_latency;
  result.completed = figures.completed;
  return {};
}

void judge(LlmCandidateResult& result, const LlmOptimizeOptions& options) {
  const LlmSlo& slo = options.slo;
  result.cost_per_1k = options.price_per_hour > 0 && result.output_tokens_per_second > 0
                           ? options.price_per_hour / 3600.0 / result.output_tokens_per_second * 1000.0
                           : kNaN;
  auto check_latency = [&](const std::optional<LatencySlo>& objective, const LlmLatency& latency, const char* what) {
    if (!objective) return;
    const double value = statistic(latency, objective->statistic);
    if (value > objective->limit_ms) {
      result.failures.push_back(
          fmt::format("{} {} {:.1f} ms > {:.1f} ms", what, objective->statistic, value, objective->limit_ms));
    }
  };
  check_latency(slo.time_to_first_token, result.time_to_first_token, "TTFT");
  check_latency(slo.inter_token_latency, result.inter_token_latency, "ITL");
  if (slo.cost_per_1k && !(result.cost_per_1k <= *slo.cost_per_1k)) {
    result.failures.push_back(fmt::format("cost {:.3g}/1k > {:.3g}/1k", result.cost_per_1k, *slo.cost_per_1k));
  }
  if (slo.top1_agreement && result.top1_agreement < *slo.top1_agreement) {
    result.failures.push_back(
        fmt::format("top-1 agreement {:.3f} < {:.3f}", result.top1_agreement, *slo.top1_agreement));
  }
  result.meets_slo = result.failures.empty();
}

// Scores this close to the best are within one run's noise on a shared machine: among them the
// fewer changes win, then the logits closer to the baseline's, so noise never picks a cache or a
// file that is cheaper only by chance and further from the model.
constexpr double kScoreTolerance = 0.02;

void recommend(LlmOptimizeReport& report, bool priced) {
  auto score = [priced](const LlmCandidateResult& candidate) {
    return priced ? 1.0 / candidate.cost_per_1k : candidate.output_tokens_per_second;
  };
  auto eligible = [](const LlmCandidateResult& candidate) { return candidate.error.empty() && candidate.meets_slo; };
  double best = 0;
  for (const LlmCandidateResult& candidate : report.candidates) {
    if (eligible(candidate)) best = std::max(best, score(candidate));
  }
  auto better = [&](const LlmCandidateResult& a, const LlmCandidateResult& b) {
    if (a.changes != b.changes) return a.changes < b.changes;
    if (a.rms_logit_difference != b.rms_logit_difference) return a.rms_logit_difference < b.rms_logit_difference;
    return score(a) > score(b);
  };
  for (std::size_t index = 0; index < report.candidates.size(); ++index) {
    const LlmCandidateResult& candidate = report.candidates[index];
    if (!eligible(candidate) || score(candidate) < best * (1 - kScoreTolerance)) continue;
    if (report.recommended < 0 || better(candidate, report.candidates[static_cast<std::size_t>(report.recommended)])) {
      report.recommended = static_cast<int>(index);
    }
  }
  if (report.recommended < 0) {
    report.reason = "none: no candidate meets every objective";
    return;
  }
  const LlmCandidateResult& chosen = report.candidates[static_cast<std::size_t>(report.recommended)];
  const LlmCandidateResult& baseline = report.candidates.front();
  report.reason = fmt::format(
      "{}: meets every objective at {} (within {:.0f}% of the best, where fewer changes and closer logits come "
      "first); {:.2f}x the baseline's output tokens/s",
      chosen.name,
      priced ? fmt::format("the lowest cost, {:.3g} per 1k output tokens", chosen.cost_per_1k)
             : fmt::format("the most output tokens/s, {:.1f}", chosen.output_tokens_per_second),
      100 * kScoreTolerance,
      baseline.output_tokens_per_second > 0 ? chosen.output_tokens_per_second / baseline.output_tokens_per_second
                                            : kNaN);
}

}  // namespace

Result<LlmSlo> parse_llm_slo(const std::string& text) {
  LlmSlo slo;
  slo.text = text;
  for (std::string clause : config_detail::split_list(text)) {
    clause.erase(std::remove(clause.begin(), clause.end(), ' '), clause.end());
    if (clause.empty()) continue;
    auto latency = [&](std::string_view prefix, std::optional<LatencySlo>& into) -> Status {
      if (into) return invalid_argument(fmt::format("the SLO has two {} clauses; give one", prefix));
      SLIPWAY_ASSIGN_OR_RETURN(LatencySlo parsed, parse_latency_slo(clause.substr(prefix.size())));
      if (parsed.statistic != "p50" && parsed.statistic != "p95" && parsed.statistic != "p99" &&
          parsed.statistic != "mean") {
        return invalid_argument("SLO clause '" + clause + "': an LLM latency statistic is p50, p95, p99 or mean");
      }
      into = parsed;
      return {};
    };
    if (clause.starts_with("ttft_")) {
      SLIPWAY_RETURN_IF_ERROR(latency("ttft_", slo.time_to_first_token));
    } else if (clause.starts_with("itl_")) {
      SLIPWAY_RETURN_IF_ERROR(latency("itl_", slo.inter_token_latency));
    } else if (clause.starts_with("cost<=")) {
      SLIPWAY_ASSIGN_OR_RETURN(Slo cost, parse_slo(clause));
      slo.cost_per_1k = cost.cost_per_1k;
    } else if (clause.starts_with("top1>=")) {
      const std::string value = clause.substr(6);
      char* end = nullptr;
      const double share = std::strtod(value.c_str(), &end);
      if (value.empty() || end != value.c_str() + value.size() || !(share >= 0 && share <= 1)) {
        return invalid_argument("SLO clause '" + clause + "': top1>= takes a share from 0 to 1");
      }
      slo.top1_agreement = share;
    } else {
      return invalid_argument("SLO clause '" + clause +
                              "' is not one of: ttft_pNN<=T, itl_pNN<=T, cost<=X/1k, top1>=S (e.g. "
                              "'ttft_p95<=500ms,itl_p95<=50ms,cost<=0.05/1k,top1>=0.9')");
    }
  }
  return slo;
}

Result<LlmOptimizeReport> optimize_llm(const LlmOptimizeOptions& options) {
  if (options.slo.cost_per_1k && options.price_per_hour <= 0) {
    return invalid_argument("a cost objective needs the machine's price (--price-per-hour)");
  }
  if (options.clients == 0 || options.requests == 0 || options.prompt_tokens == 0 || options.output_tokens == 0) {
    return invalid_argument("clients, requests, prompt tokens and output tokens must each be at least 1");
  }
  if (options.requests > 100'000 || options.clients > llm::kMaxEngineSequences ||
      options.requests * options.output_tokens > 10'000'000) {
    return invalid_argument(
        fmt::format("the load is too large to measure: at most 100000 requests, {} clients and 10 million output "
                    "tokens in all",
                    llm::kMaxEngineSequences));
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::shared_ptr<const llm::LlamaModel> baseline, llm::LlamaModel::open(options.model_path));
  const llm::LlamaConfig& config = baseline->config();
  const std::size_t context =
      options.engine.context > 0 ? options.engine.context : std::min(config.context, llm::kDefaultContextCap);
  if (options.prompt_tokens + options.output_tokens > context) {
    return invalid_argument(fmt::format("{} prompt and {} output tokens do not fit a context of {}",
                                        options.prompt_tokens, options.output_tokens, context));
  }
  // Quantized candidates are written to the caller's folder, or to one removed at the end.
  std::string work_dir = options.work_dir;
  struct Scratch {
    std::string path;
    ~Scratch() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  } scratch;
  if (work_dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "slipway-optimize-llm-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return io_error("cannot create a scratch folder under " + pattern);
    work_dir = scratch.path = pattern;
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<Plan> plans, plan_candidates(options, work_dir, *baseline));
  const auto prompts = make_prompts(options.requests, options.prompt_tokens, config.vocabulary);
  LlmOptimizeReport report;
  report.baseline_name = options.baseline_name.empty() ? options.model_path : options.baseline_name;
  report.slo_text = options.slo.text;
  report.price_per_hour = options.price_per_hour;
  report.clients = options.clients;
  report.requests = options.requests;
  report.prompt_tokens = options.prompt_tokens;
  report.output_tokens = options.output_tokens;
  report.files_kept = scratch.path.empty();
  const int total = static_cast<int>(plans.size());
  for (int step = 0; step < total; ++step) {
    Plan& candidate = plans[static_cast<std::size_t>(step)];
    if (options.on_progress) options.on_progress(step, total, candidate.result.name);
    try {
      if (Status status = measure(candidate, baseline, prompts, options); !status.ok()) {
        candidate.result.error = status.message();
      }
    } catch (const std::bad_alloc&) {
      candidate.result.error = "out of memory";
    }
    if (candidate.result.error.empty()) judge(candidate.result, options);
    report.candidates.push_back(std::move(candidate.result));
  }
  if (options.on_progress) options.on_progress(total, total, "done");
  recommend(report, options.price_per_hour > 0);
  return report;
}

}  // namespace slipway::optimize
