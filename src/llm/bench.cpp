// `slipway llm bench`'s measurements: llama-bench's pp and tg tests over the engine, and the two
// physical limits they are read against (memory read bandwidth, the int8 dot-product peak).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <new>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<BatchToken> random_tokens(const LlamaConfig& config, std::size_t count, std::size_t first_position) {
  std::mt19937 random(17);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(config.vocabulary) - 1);
  std::vector<BatchToken> batch(count);
  for (std::size_t i = 0; i < count; ++i) batch[i] = {0, first_position + i, token(random)};
  return batch;
}

// One forward pass, on whichever threads and ranks the caller keeps.
using PassFunction = std::function<Status(KvCache& cache, std::span<const BatchToken> batch,
                                          const std::vector<bool>& wants, std::vector<float>& logits)>;

// Seconds for one run of the test: the prompt as one batch, or tokens decoded one by one.
Result<double> run_once(const LlamaConfig& config, bool prompt, std::size_t tokens, KvCacheType type,
                        const PassFunction& pass) {
  KvCache cache(config, (tokens + kKvBlockTokens - 1) / kKvBlockTokens, 1, type);
  std::vector<float> logits;
  std::vector<BatchToken> batch = random_tokens(config, tokens, 0);
  auto start = Clock::now();
  if (prompt) {
    std::vector<bool> wants(tokens, false);
    wants.back() = true;
    SLIPWAY_RETURN_IF_ERROR(pass(cache, batch, wants, logits));
  } else {
    const std::vector<bool> wants = {true};
    for (const BatchToken& token : batch) SLIPWAY_RETURN_IF_ERROR(pass(cache, std::span(&token, 1), wants, logits));
  }
  return seconds_since(start);
}

// A prompt of random tokens through `exact` and through `other`, every position's logits
// compared.
Result<LogitDifference> difference(const LlamaConfig& config, std::size_t prompt_tokens, KvCacheType exact_type,
                                   const PassFunction& exact, KvCacheType other_type, const PassFunction& other) {
  if (prompt_tokens == 0 || prompt_tokens > config.context) {
    return invalid_argument(
        fmt::format("{} tokens do not fit the model's context of {}", prompt_tokens, config.context));
  }
  const std::vector<BatchToken> batch = random_tokens(config, prompt_tokens, 0);
  const std::vector<bool> wants(prompt_tokens, true);
  auto logits_of = [&](KvCacheType type, const PassFunction& pass) -> Result<std::vector<float>> {
    KvCache cache(config, (prompt_tokens + kKvBlockTokens - 1) / kKvBlockTokens, 1, type);
    std::vector<float> logits;
    SLIPWAY_RETURN_IF_ERROR(pass(cache, batch, wants, logits));
    return logits;
  };
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<float> exact_logits, logits_of(exact_type, exact));
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<float> other_logits, logits_of(other_type, other));
  LogitDifference result;
  result.positions = prompt_tokens;
  double squares = 0, exact_squares = 0;
  std::size_t agree = 0;
  const std::size_t vocabulary = config.vocabulary;
  for (std::size_t position = 0; position < prompt_tokens; ++position) {
    const float* a = exact_logits.data() + position * vocabulary;
    const float* b = other_logits.data() + position * vocabulary;
    for (std::size_t i = 0; i < vocabulary; ++i) {
      const double gap = static_cast<double>(a[i]) - b[i];
      result.max_abs_difference = std::max(result.max_abs_difference, std::fabs(gap));
      squares += gap * gap;
      exact_squares += static_cast<double>(a[i]) * a[i];
    }
    agree += std::max_element(a, a + vocabulary) - a == std::max_element(b, b + vocabulary) - b ? 1 : 0;
  }
  const auto count = static_cast<double>(exact_logits.size());
  result.rms_difference = std::sqrt(squares / count);
  result.logit_rms = std::sqrt(exact_squares / count);
  result.top1_agreement = static_cast<double>(agree) / static_cast<double>(prompt_tokens);
  return result;
}

PassFunction pass_on(const LlamaModel& model, ThreadTeam& team) {
  return [&model, &team](KvCache& cache, std::span<const BatchToken> batch, const std::vector<bool>& wants,
                         std::vector<float>& logits) { return forward(model, cache, batch, wants, logits, team); };
}

PassFunction pass_on(const TensorParallelModel& model, RankTeams& teams) {
  return [&model, &teams](KvCache& cache, std::span<const BatchToken> batch, const std::vector<bool>& wants,
                          std::vector<float>& logits) { return forward(model, cache, batch, wants, logits, teams); };
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Result<LogitDifference> compare_kv_cache(const LlamaModel& model, KvCacheType type, std::size_t prompt_tokens,
                                         int threads) {
  ThreadTeam team(threads);
  const PassFunction pass = pass_on(model, team);
  return difference(model.config(), prompt_tokens, KvCacheType::kF32, pass, type, pass);
}

Result<LogitDifference> compare_models(const LlamaModel& exact, const LlamaModel& other, KvCacheType other_type,
                                       std::size_t prompt_tokens, int threads) {
  const LlamaConfig &a = exact.config(), &b = other.config();
  if (a.embedding != b.embedding || a.layers != b.layers || a.heads != b.heads || a.kv_heads != b.kv_heads ||
      a.vocabulary != b.vocabulary || a.context != b.context) {
    return invalid_argument("the two models differ in shape; only another quantization of the same model compares");
  }
  ThreadTeam team(threads);
  return difference(a, prompt_tokens, KvCacheType::kF32, pass_on(exact, team), other_type, pass_on(other, team));
}

Result<LogitDifference> compare_tensor_parallel(const std::shared_ptr<const LlamaModel>& model, std::size_t ranks,
                                                std::size_t prompt_tokens, int threads) {
  SLIPWAY_ASSIGN_OR_RETURN(auto split, TensorParallelModel::split(model, ranks));
  ThreadTeam team(threads);
  RankTeams teams(ranks, threads);
  return difference(model->config(), prompt_tokens, KvCacheType::kF32, pass_on(*model, team), KvCacheType::kF32,
                    pass_on(*split, teams));
}

Result<std::vector<LlmBenchFigure>> bench_model(const std::shared_ptr<const LlamaModel>& model,
                                                const LlmBenchOptions& options) {
  const LlamaConfig& config = model->config();
  for (std::size_t tokens : {options.prompt_tokens, options.generated_tokens}) {
    if (tokens > config.context) {
      return invalid_argument(fmt::format("{} tokens do not fit the model's context of {}", tokens, config.context));
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto split, TensorParallelModel::split(model, options.tensor_parallel));
  std::vector<LlmBenchFigure> figures;
  for (int threads : options.threads) {
    if (static_cast<std::size_t>(threads) < options.tensor_parallel) {
      log_warn(fmt::format("{} thread(s) skipped: {} ranks need at least one each", threads, options.tensor_parallel));
      continue;
    }
    RankTeams teams(options.tensor_parallel, threads);
    const PassFunction pass = pass_on(*split, teams);
    for (bool prompt : {true, false}) {
      std::size_t tokens = prompt ? options.prompt_tokens : options.generated_tokens;
      if (tokens == 0) continue;
      SLIPWAY_RETURN_IF_ERROR(run_once(config, prompt, tokens, options.kv_cache_type, pass).status());  // warm-up
      std::vector<double> rates;
      for (std::size_t repetition = 0; repetition < std::max<std::size_t>(1, options.repetitions); ++repetition) {
        SLIPWAY_ASSIGN_OR_RETURN(double seconds, run_once(config, prompt, tokens, options.kv_cache_type, pass));
        rates.push_back(static_cast<double>(tokens) / seconds);
      }
      double mean = std::accumulate(rates.begin(), rates.end(), 0.0) / static_cast<double>(rates.size());
      double squares = 0;
      for (double rate : rates) squares += (rate - mean) * (rate - mean);
      double deviation = rates.size() > 1 ? std::sqrt(squares / static_cast<double>(rates.size() - 1)) : 0.0;
      figures.push_back({fmt::format("{}{}", prompt ? "pp" : "tg", tokens), threads, mean, deviation});
    }
  }
  if (figures.empty() && !options.threads.empty()) {
    return invalid_argument(fmt::format("no thread count reaches the {} ranks asked for", options.tensor_parallel));
  }
  return figures;
}

Result<CudaBenchReport> bench_cuda(const std::shared_ptr<const LlamaModel>& model, const CudaBenchOptions& options) {
  const LlamaConfig& config = model->config();
  CudaBenchReport report;
  SLIPWAY_ASSIGN_OR_RETURN(report.device, cuda_device());
  std::size_t most_sequences = 1;
  for (std::size_t count : options.sequences) most_sequences = std::max(most_sequences, count);
  const std::size_t check_tokens = std::min(options.check_tokens, config.context);
  const std::size_t context = std::max({options.prompt_tokens, options.generated_tokens, check_tokens, std::size_t{1}});
  if (context > config.context) {
    return invalid_argument(fmt::format("{} tokens do not fit the model's context of {}", context, config.context));
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::unique_ptr<CudaForward> gpu, CudaForward::create(model, most_sequences, context));
  report.weight_bytes = gpu->weight_bytes();
  const PassFunction on_gpu = [&gpu](KvCache& /*cache*/, std::span<const BatchToken> batch,
                                     const std::vector<bool>& wants,
                                     std::vector<float>& logits) { return gpu->forward(batch, wants, logits); };
  ThreadTeam team(options.threads);
  SLIPWAY_ASSIGN_OR_RETURN(report.logits, difference(config, check_tokens, KvCacheType::kF32, pass_on(*model, team),
                                                     KvCacheType::kF32, on_gpu));
  // Decoding reads every weight once per step and each sequence's keys and values so far (the
  // mean over the run: half the generated length), all in floats.
  const double cache_bytes_per_position = 2.0 * config.layers * config.kv_heads * config.head_dim * sizeof(float);
  auto decode_limit = [&](std::size_t sequences) {
    const double step_bytes =
        static_cast<double>(report.weight_bytes) +
        static_cast<double>(sequences) * cache_bytes_per_position * static_cast<double>(options.generated_tokens) / 2.0;
    return report.device.bandwidth * static_cast<double>(sequences) / step_bytes;
  };
  auto measure = [&](const std::string& test, std::size_t sequences, std::size_t steps, bool prompt,
                     double limit) -> Status {
    std::vector<double> rates;
    for (std::size_t repetition = 0; repetition <= std::max<std::size_t>(1, options.repetitions); ++repetition) {
      std::vector<float> logits;
      const auto start = Clock::now();
      if (prompt) {
        std::vector<BatchToken> batch = random_tokens(config, steps, 0);
        std::vector<bool> wants(steps, false);
        wants.back() = true;
        SLIPWAY_RETURN_IF_ERROR(gpu->forward(batch, wants, logits));
      } else {
        const std::vector<bool> wants(sequences, true);
        std::vector<BatchToken> step(sequences);
        for (std::size_t position = 0; position < steps; ++position) {
          for (std::size_t s = 0; s < sequences; ++s) {
            step[s] = {s, position, static_cast<std::int32_t>((s * 7919 + position * 104729) % config.vocabulary)};
          }
          SLIPWAY_RETURN_IF_ERROR(gpu->forward(step, wants, logits));
        }
      }
      // The first run warms up (kernel loading, allocations).
      if (repetition > 0) rates.push_back(static_cast<double>(steps * sequences) / seconds_since(start));
    }
    report.figures.push_back({test, median(rates), limit});
    return {};
  };
  if (options.prompt_tokens > 0) {
    SLIPWAY_RETURN_IF_ERROR(measure(fmt::format("pp{}", options.prompt_tokens), 1, options.prompt_tokens, true, 0));
  }
  if (options.generated_tokens > 0) {
    SLIPWAY_RETURN_IF_ERROR(
        measure(fmt::format("tg{}", options.generated_tokens), 1, options.generated_tokens, false, decode_limit(1)));
    for (std::size_t sequences : options.sequences) {
      if (sequences <= 1) continue;
      SLIPWAY_RETURN_IF_ERROR(measure(fmt::format("decode x{}", sequences), sequences, options.generated_tokens, false,
                                      decode_limit(sequences)));
    }
  }
  return report;
}

std::uint64_t decode_bytes_per_token(const LlamaModel& model, std::size_t context, KvCacheType type) {
  const LlamaConfig& config = model.config();
  auto packed = [](const WeightMatrix& matrix) { return static_cast<std::uint64_t>(matrix.packed->bytes()); };
  std::uint64_t bytes = packed(model.output()) + model.token_embedding().row_bytes() + config.embedding * 4;
  for (const auto& layer : model.layers()) {
    for (const WeightMatrix* matrix :
         {&layer.query, &layer.key, &layer.value, &layer.attention_output, &layer.gate, &layer.up, &layer.down}) {
      bytes += packed(*matrix);
    }
    bytes += 2 * config.embedding * 4;
  }
  bytes += static_cast<std::uint64_t>(context) * KvCache::block_bytes(config, type) / kKvBlockTokens;
  return bytes;
}

std::uint64_t multiply_adds_per_token(const LlamaModel& model, bool with_output) {
  auto size = [](const WeightMatrix& matrix) { return static_cast<std::uint64_t>(matrix.rows) * matrix.columns; };
  std::uint64_t total = with_output ? size(model.output()) : 0;
  for (const auto& layer : model.layers()) {
    for (const WeightMatrix* matrix :
         {&layer.query, &layer.key, &layer.value, &layer.attention_output, &layer.gate, &layer.up, &layer.down}) {
      total += size(*matrix);
    }
  }
  return total;
}

namespace {

// Reads `bytes` as four streams at once, a cache line from each per step: one stream leaves the
// core's memory-level parallelism unused and understates what a product reading four panels at
// once gets (on the 2-core Xeon of docs/benchmarks.md it measured 20-60% below the decode rate itself).
__attribute__((target("avx2"))) std::uint64_t read_avx2(const std::byte* data, std::size_t bytes) {
  constexpr std::size_t kStreams = 4;
  const std::size_t stream_bytes = bytes / kStreams / 64 * 64;
  __m256i sums[kStreams] = {};
  for (std::size_t at = 0; at < stream_bytes; at += 64) {
#pragma GCC unroll 4
    for (std::size_t stream = 0; stream < kStreams; ++stream) {
      const std::byte* line = data + stream * stream_bytes + at;
      sums[stream] = _mm256_xor_si256(sums[stream], _mm256_load_si256(reinterpret_cast<const __m256i*>(line)));
      sums[stream] = _mm256_xor_si256(sums[stream], _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32)));
    }
  }
  __m256i total = _mm256_xor_si256(_mm256_xor_si256(sums[0], sums[1]), _mm256_xor_si256(sums[2], sums[3]));
  return static_cast<std::uint64_t>(_mm256_extract_epi64(total, 0) ^ _mm256_extract_epi64(total, 3));
}

__attribute__((target("avx512f,avx512vnni"))) double int8_peak_avx512(std::uint64_t iterations) {
  __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
  __m512i acc[16];
  for (auto& value : acc) value = _mm512_setzero_si512();
  auto start = Clock::now();
  for (std::uint64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (auto& value : acc) value = _mm512_dpbusd_epi32(value, a, b);
    __asm__ volatile("" : "+v"(a));  // keeps the loop from being folded
  }
  double seconds = seconds_since(start);
  __m512i total = acc[0];
  for (int i = 1; i < 16; ++i) total = _mm512_add_epi32(total, acc[i]);
  alignas(64) std::int32_t lanes[16];
  _mm512_store_si512(lanes, total);
  volatile std::int32_t sink = lanes[0];  // keeps the sums live
  (void)sink;
  return static_cast<double>(iterations) * 16 * 64 / seconds;
}

bool cpu_has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

double measure_read_bandwidth(std::size_t bytes, int threads) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return 0;
  threads = std::max(threads, 1);
  std::size_t per_thread = bytes / static_cast<std::size_t>(threads) / 256 * 256;
  // In pages as the weights lie, so the roofline compares like with like.
  HugePageBuffer buffer;
  try {
    buffer = HugePageBuffer(per_thread * static_cast<std::size_t>(threads));
  } catch (const std::bad_alloc&) {
    return 0;
  }
  std::byte* data = buffer.data();
  std::fill_n(data, buffer.size(), std::byte{1});  // every page mapped
  std::vector<double> rates;
  std::vector<std::uint64_t> sinks(static_cast<std::size_t>(threads));
  for (int pass = 0; pass < 7; ++pass) {
    auto start = Clock::now();
    parallel_for(static_cast<std::size_t>(threads), threads,
                 [&](std::size_t part) { sinks[part] = read_avx2(data + part * per_thread, per_thread); });
    rates.push_back(static_cast<double>(per_thread * static_cast<std::size_t>(threads)) / seconds_since(start));
  }
  return median(rates);
}

double measure_int8_peak(int threads) {
  if (!cpu_has_vnni()) return 0;
  threads = std::max(threads, 1);
  constexpr std::uint64_t kIterations = 10'000'000;
  std::vector<double> rates(static_cast<std::size_t>(threads));
  parallel_for(rates.size(), threads, [&](std::size_t part) { rates[part] = int8_peak_avx512(kIterations); });
  return std::accumulate(rates.begin(), rates.end(), 0.0);
}

}  // namespace slipway::llm
