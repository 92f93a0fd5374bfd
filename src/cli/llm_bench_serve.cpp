// `slipway llm bench-serve`: load on an OpenAI-compatible streaming /v1/completions endpoint,
// measured the way vLLM's benchmarks/benchmark_serving.py measures one.
//
// Every request is planned from --seed alone: its prompt (the shared system prefix, then its own
// random token ids in [10, vocab)) and its max_tokens come from a generator seeded by (seed,
// request index), so a run sends the same requests whatever the threads' timing. Arrival times
// are all 0 (--rate 0) or a Poisson process at --rate. --clients threads take the requests in
// order; each waits for its request's arrival time, then sends it on a fresh connection and reads
// the response as it arrives, stamping each server-sent event with the time its last bytes were
// received (completion_stream.cpp).
//
// TTFT is send (before the connection is made, as vLLM's aiohttp client counts it) to the first
// event that carries text; ITL the gaps between successive text events, pooled over requests;
// TPOT per request (e2e - TTFT) / (output tokens - 1); end-to-end send to `data: [DONE]`. Output
// tokens are the server's usage.completion_tokens (the text events when it sends no usage).
// Only numbers are kept: a few per request and one float per gap, at most max_tokens of them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "cli/cli.h"
#include "cli/completion_stream.h"
#include "slipway/http.h"

namespace slipway::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeFlags {
  std::string url = "http://127.0.0.1:8080";
  std::string model;
  std::string api_key;
  int clients = 16;
  std::size_t requests = 64;
  double rate = 0;  // requests/s of a Poisson process; 0: all at once
  std::size_t prompt_tokens = 128;
  std::size_t output_tokens = 128;
  double length_spread = 0;
  std::size_t system_prompt_tokens = 0;
  std::uint32_t vocab = 0;  // 0: the served model's, read from /v1/models/MODEL
  double temperature = 0;
  std::uint64_t seed = 1;
  double timeout_s = 600;
};

constexpr std::uint32_t kFirstPromptToken = 10;  // below it sit a tokenizer's control tokens
constexpr std::size_t kMaxFailureReasons = 5;

// ---------------------------------------------------------------------------------------------
// The requests.

// One request's lengths, drawn from (seed, index) alone.
struct RequestPlan {
  std::size_t prompt_tokens = 0;  // its own, after the shared system prefix
  std::size_t output_tokens = 0;
  std::mt19937_64 random;  // goes on to draw the prompt's tokens
};

std::size_t spread_length(std::size_t length, double spread, std::mt19937_64& random) {
  if (spread <= 0) return length;
  auto low = static_cast<std::size_t>(std::llround(static_cast<double>(length) * (1 - spread)));
  auto high = static_cast<std::size_t>(std::llround(static_cast<double>(length) * (1 + spread)));
  return std::max<std::size_t>(1, std::uniform_int_distribution<std::size_t>(low, high)(random));
}

RequestPlan plan_request(const BenchServeFlags& flags, std::size_t index) {
  std::seed_seq seeds{static_cast<std::uint32_t>(flags.seed), static_cast<std::uint32_t>(flags.seed >> 32),
                      static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0x5e12u};
  RequestPlan plan{0, 0, std::mt19937_64(seeds)};
  plan.prompt_tokens = spread_length(flags.prompt_tokens, flags.length_spread, plan.random);
  plan.output_tokens = spread_length(flags.output_tokens, flags.length_spread, plan.random);
  return plan;
}

// The shared prefix, as the JSON text of its token ids with a trailing comma ("" when empty).
std::string system_prompt_json(const BenchServeFlags& flags) {
  std::seed_seq seeds{static_cast<std::uint32_t>(flags.seed), static_cast<std::uint32_t>(flags.seed >> 32), 0x5157u};
  std::mt19937_64 random(seeds);
  std::uniform_int_distribution<std::uint32_t> token(kFirstPromptToken, flags.vocab - 1);
  std::string json;
  for (std::size_t i = 0; i < flags.system_prompt_tokens; ++i) {
    fmt::format_to(std::back_inserter(json), "{},", token(random));
  }
  return json;
}

// The whole HTTP request: head and JSON body.
std::string request_text(const BenchServeFlags& flags, const CompletionTarget& target, const std::string& system_prompt,
                         RequestPlan& plan) {
  std::uniform_int_distribution<std::uint32_t> token(kFirstPromptToken, flags.vocab - 1);
  std::string body = "{\"model\":";
  append_json_string(body, flags.model);
  body += ",\"prompt\":[";
  body += system_prompt;
  for (std::size_t i = 0; i < plan.prompt_tokens; ++i) {
    fmt::format_to(std::back_inserter(body), "{}{}", i == 0 ? "" : ",", token(plan.random));
  }
  JsonWriter temperature;
  temperature.value(flags.temperature);
  fmt::format_to(std::back_inserter(body),
                 "],\"max_tokens\":{},\"temperature\":{},\"ignore_eos\":true,\"stream\":true,"
                 "\"stream_options\":{{\"include_usage\":true}}}}",
                 plan.output_tokens, temperature.str());
  std::string head = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: slipway-bench-serve\r\nAccept: text/event-stream\r\n"
      "Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
      target.target, target.host_header, body.size());
  if (!flags.api_key.empty()) head += "Authorization: Bearer " + flags.api_key + "\r\n";
  return head + "\r\n" + body;
}

// ---------------------------------------------------------------------------------------------
// The report.

// Mean and percentiles (linear between ranks, as numpy's default); NaN (JSON null) when empty.
struct Summary {
  double mean = std::nan(""), p50 = std::nan(""), p95 = std::nan(""), p99 = std::nan("");
};

template <typename T>
Summary summarize(std::vector<T> values) {
  Summary summary;
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  auto at = [&](double share) {
    double rank = share * static_cast<double>(values.size() - 1);
    auto below = static_cast<std::size_t>(rank);
    std::size_t above = std::min(below + 1, values.size() - 1);
    double fraction = rank - static_cast<double>(below);
    return static_cast<double>(values[below]) * (1 - fraction) + static_cast<double>(values[above]) * fraction;
  };
  double total = 0;
  for (T value : values) total += static_cast<double>(value);
  summary.mean = total / static_cast<double>(values.size());
  summary.p50 = at(0.50);
  summary.p95 = at(0.95);
  summary.p99 = at(0.99);
  return summary;
}

struct BenchServeReport : CommandResult {
  BenchServeFlags settings;
  std::string endpoint;
  std::size_t completed = 0, failed = 0;
  double duration_s = 0;  // first send to last finish
  std::uint64_t output_tokens = 0, prompt_tokens = 0;
  Summary ttft, itl, tpot, e2e;
  std::vector<std::pair<std::string, std::size_t>> failure_reasons;  // the most frequent first, at most 5
  std::size_t other_failure_reasons = 0;                             // distinct reasons beyond those

  double per_second(double count) const { return duration_s > 0 ? count / duration_s : 0.0; }

  static void write_summary(JsonWriter& json, std::string_view name, const Summary& summary) {
    json.key(name).begin_object().key("mean").value(summary.mean).key("p50").value(summary.p50);
    json.key("p95").value(summary.p95).key("p99").value(summary.p99).end_object();
  }

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("url").value(endpoint).key("model").value(settings.model);
    json.key("settings").begin_object().key("clients").value(settings.clients);
    json.key("requests").value(static_cast<std::uint64_t>(settings.requests)).key("rate").value(settings.rate);
    json.key("prompt_tokens").value(static_cast<std::uint64_t>(settings.prompt_tokens));
    json.key("output_tokens").value(static_cast<std::uint64_t>(settings.output_tokens));
    json.key("length_spread").value(settings.length_spread);
    json.key("system_prompt_tokens").value(static_cast<std::uint64_t>(settings.system_prompt_tokens));
    json.key("vocab").value(static_cast<std::uint64_t>(settings.vocab)).key("temperature").value(settings.temperature);
    json.key("seed").value(settings.seed).key("timeout_s").value(settings.timeout_s).end_object();
    json.key("completed").value(static_cast<std::uint64_t>(completed));
    json.key("failed").value(static_cast<std::uint64_t>(failed)).key("duration_s").value(duration_s);
    json.key("requests_per_second").value(per_second(static_cast<double>(completed)));
    json.key("output_tokens_per_second").value(per_second(static_cast<double>(output_tokens)));
    json.key("total_output_tokens").value(output_tokens).key("total_prompt_tokens").value(prompt_tokens);
    write_summary(json, "ttft_ms", ttft);
    write_summary(json, "itl_ms", itl);
    write_summary(json, "tpot_ms", tpot);
    write_summary(json, "e2e_ms", e2e);
    json.key("failures").begin_array();
    for (const auto& [reason, count] : failure_reasons) {
      json.begin_object().key("reason").value(reason).key("count").value(static_cast<std::uint64_t>(count));
      json.end_object();
    }
    json.end_array().key("other_failure_reasons").value(static_cast<std::uint64_t>(other_failure_reasons));
    json.end_object();
  }

  void write_text(std::ostream& out) const override {
    out << fmt::format("{} ({}): {} requests, at most {} in flight, {}\n", endpoint, settings.model, settings.requests,
                       settings.clients,
                       settings.rate > 0 ? fmt::format("Poisson arrivals at {} requests/s", settings.rate)
                                         : std::string("all released at once"));
    out << fmt::format(
        "prompts {} tokens{}, outputs {} tokens{}\n", settings.prompt_tokens,
        settings.system_prompt_tokens > 0 ? fmt::format(" after a shared prefix of {}", settings.system_prompt_tokens)
                                          : std::string(),
        settings.output_tokens,
        settings.length_spread > 0 ? fmt::format(", each ±{:.0f}%", 100 * settings.length_spread) : std::string());
    out << fmt::format(
        "completed {}, failed {} in {:.2f} s: {:.2f} requests/s, {:.1f} output tokens/s "
        "({} output, {} prompt tokens)\n",
        completed, failed, duration_s, per_second(static_cast<double>(completed)),
        per_second(static_cast<double>(output_tokens)), output_tokens, prompt_tokens);
    auto row = [](std::string name, const Summary& summary) {
      auto cell = [](double value) { return std::isnan(value) ? std::string("-") : fmt::format("{:.2f}", value); };
      return std::vector<std::string>{std::move(name), cell(summary.mean), cell(summary.p50), cell(summary.p95),
                                      cell(summary.p99)};
    };
    print_table(out, {"ms", "mean", "p50", "p95", "p99"},
                {row("TTFT", ttft), row("ITL", itl), row("TPOT", tpot), row("E2E", e2e)});
    if (!failure_reasons.empty()) out << "failures:\n";
    for (const auto& [reason, count] : failure_reasons) out << fmt::format("  {:>6} x {}\n", count, reason);
    if (other_failure_reasons > 0) out << fmt::format("  and {} other reasons\n", other_failure_reasons);
  }
};

BenchServeReport summarize_run(const BenchServeFlags& flags, const CompletionTarget& target,
                               const std::vector<CompletionRecord>& records, std::vector<float> gaps) {
  BenchServeReport report;
  report.settings = flags;
  report.settings.api_key.clear();
  report.endpoint = target.display;
  std::vector<double> ttft, tpot, e2e;
  std::map<std::string, std::size_t> reasons;
  double first_sent = std::numeric_limits<double>::infinity(), last_finished = 0;
  for (const auto& record : records) {
    first_sent = std::min(first_sent, record.sent_s);
    last_finished = std::max(last_finished, record.finished_s);
    if (!record.completed) {
      ++report.failed;
      ++reasons[record.failure];
      continue;
    }
    ++report.completed;
    report.output_tokens += record.output_tokens;
    report.prompt_tokens += record.prompt_tokens;
    ttft.push_back(record.ttft_ms);
    e2e.push_back(record.e2e_ms);
    if (record.output_tokens > 1) {
      tpot.push_back((record.e2e_ms - record.ttft_ms) / static_cast<double>(record.output_tokens - 1));
    }
  }
  report.duration_s = records.empty() ? 0.0 : std::max(0.0, last_finished - first_sent);
  report.ttft = summarize(std::move(ttft));
  report.tpot = summarize(std::move(tpot));
  report.e2e = summarize(std::move(e2e));
  report.itl = summarize(std::move(gaps));
  std::vector<std::pair<std::string, std::size_t>> ranked(reasons.begin(), reasons.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (ranked.size() > kMaxFailureReasons) {
    report.other_failure_reasons = ranked.size() - kMaxFailureReasons;
    ranked.resize(kMaxFailureReasons);
  }
  report.failure_reasons = std::move(ranked);
  return report;
}

Status check_flags(const BenchServeFlags& flags) {
  if (flags.model.empty()) return invalid_argument("--model must name the model the server serves");
  if (flags.vocab != 0 && flags.vocab <= kFirstPromptToken) {
    return invalid_argument(fmt::format("--vocab must be more than {} (prompts draw ids from [{}, vocab))",
                                        kFirstPromptToken, kFirstPromptToken));
  }
  if (!std::isfinite(flags.rate) || flags.rate < 0) return invalid_argument("--rate must be 0 or a positive number");
  if (!(flags.length_spread >= 0 && flags.length_spread < 1)) {
    return invalid_argument("--length-spread must be at least 0 and below 1");
  }
  if (!(flags.timeout_s > 0 && flags.timeout_s <= 86400)) {
    return invalid_argument("--timeout-s must be more than 0 and at most 86400");
  }
  if (!(flags.temperature >= 0 && flags.temperature <= 100)) {
    return invalid_argument("--temperature must be between 0 and 100");
  }
  return Status();
}

// The served model's vocabulary size, from the server's /v1/models/MODEL (vocab_size): prompts
// drawn past it would all fail, each with its own token in the message.
Result<std::uint32_t> served_vocabulary(const CompletionTarget& target, const BenchServeFlags& flags) {
  // The API's root: up to /v1 (a --url may end in /v1/chat/completions), else before /completions.
  std::size_t root_end = target.display.rfind("/v1/");
  root_end = root_end == std::string::npos ? target.display.rfind("/completions") : root_end + 3;
  std::string model_id;  // percent-encoded: an id may hold '/' (org/name) or spaces
  for (unsigned char c : flags.model) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      model_id += static_cast<char>(c);
    } else {
      model_id += fmt::format("%{:02X}", c);
    }
  }
  std::string url = target.display.substr(0, root_end) + "/models/" + model_id;
  std::vector<std::pair<std::string, std::string>> headers;
  if (!flags.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + flags.api_key);
  auto refused = [&](const std::string& why) {
    return failed_precondition("cannot read the vocabulary size of '" + flags.model + "' from " + url + " (" + why +
                               "); give --vocab N");
  };
  auto response =
      http::fetch("GET", url, {}, headers,
                  std::chrono::milliseconds(static_cast<std::int64_t>(std::min(flags.timeout_s, 30.0) * 1000)));
  if (!response.ok()) return refused(response.status().message());
  if (response->status != 200) return refused("HTTP " + std::to_string(response->status));
  simdjson::dom::parser parser;
  std::uint64_t vocabulary = 0;
  if (parser.parse(response->body)["vocab_size"].get(vocabulary) != simdjson::SUCCESS) {
    return refused("its answer has no vocab_size");
  }
  if (vocabulary <= kFirstPromptToken || vocabulary > (1u << 24)) {
    return refused("its vocab_size is " + std::to_string(vocabulary));
  }
  return static_cast<std::uint32_t>(vocabulary);
}

int run_llm_bench_serve(const GlobalOptions& global, const BenchServeFlags& given) {
  if (auto status = check_flags(given); !status.ok()) return fail(status);
  auto target = resolve_completion_target(given.url);
  if (!target.ok()) return fail(target.status());
  BenchServeFlags flags = given;
  if (flags.vocab == 0) {
    auto vocabulary = served_vocabulary(*target, flags);
    if (!vocabulary.ok()) return fail(vocabulary.status());
    flags.vocab = *vocabulary;
  }
  const std::string system_prompt = system_prompt_json(flags);
  std::vector<double> arrivals(flags.requests, 0.0);  // seconds from the start
  if (flags.rate > 0) {
    std::seed_seq seeds{static_cast<std::uint32_t>(flags.seed), static_cast<std::uint32_t>(flags.seed >> 32), 0xa4u};
    std::mt19937_64 random(seeds);
    std::exponential_distribution<double> gap(flags.rate);
    double at = 0;
    for (double& arrival : arrivals) {
      arrival = at;
      at += gap(random);
    }
  }
  log_info(fmt::format("bench-serve {}: {} requests, {} clients, {}", target->display, flags.requests, flags.clients,
                       flags.rate > 0 ? fmt::format("Poisson at {} requests/s", flags.rate) : "all at once"));

  std::vector<CompletionRecord> records(flags.requests);
  const auto clients = static_cast<std::size_t>(std::min<std::uint64_t>(flags.clients, flags.requests));
  std::vector<std::vector<float>> client_gaps(clients);
  std::atomic<std::size_t> next_request{0}, finished{0}, failed{0};
  std::atomic<std::uint64_t> output_tokens{0};
  const Clock::time_point start = Clock::now();
  auto client = [&](std::vector<float>& gaps) {
    for (std::size_t index; (index = next_request.fetch_add(1)) < flags.requests;) {
      RequestPlan plan = plan_request(flags, index);
      std::string request = request_text(flags, *target, system_prompt, plan);
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[index])));
      records[index] = send_completion(*target, request, plan.output_tokens, start, flags.timeout_s, gaps);
      output_tokens += records[index].output_tokens;
      if (!records[index].completed) ++failed;
      ++finished;
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (std::size_t i = 0; i < clients; ++i) {
    try {
      threads.emplace_back(client, std::ref(client_gaps[i]));
    } catch (const std::system_error& error) {  // the threads started take every request
      log_warn(fmt::format("bench-serve: {} of {} clients started ({})", threads.size(), clients, error.what()));
      if (threads.empty()) return fail(resource_exhausted("no client thread could be started"));
      break;
    }
  }
  {
    ProgressBar progress("bench-serve", static_cast<std::int64_t>(flags.requests), !global.json);
    while (finished.load() < flags.requests) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      progress.update(static_cast<std::int64_t>(finished.load()),
                      fmt::format("{} failed, {:.0f} output tokens/s", failed.load(),
                                  static_cast<double>(output_tokens.load()) / std::max(elapsed, 1e-9)));
    }
  }
  for (auto& thread : threads) thread.join();

  std::vector<float> gaps;
  for (auto& part : client_gaps) {
    gaps.insert(gaps.end(), part.begin(), part.end());
    std::vector<float>().swap(part);
  }
  BenchServeReport report = summarize_run(flags, *target, records, std::move(gaps));
  render(global, report);
  return report.failed == 0 ? 0 : 1;
}

}  // namespace

void add_llm_bench_serve_command(CLI::App* llm_command, LlmSubcommandRunner& run) {
  auto flags = std::make_shared<BenchServeFlags>();
  auto* command = llm_command->add_subcommand(
      "bench-serve",
      "Load an OpenAI-compatible /v1/completions server with streamed requests and report output tokens/s, "
      "TTFT, ITL, TPOT and latency (vLLM's benchmark_serving method)");
  command->footer(
      "Each request's prompt is random token ids (the token-id array form of 'prompt'), after the shared "
      "--system-prompt-tokens prefix; it asks for exactly its output length (max_tokens with ignore_eos) and "
      "streams it with stream_options.include_usage. At most --clients requests are in flight, each on its own "
      "connection; with --rate they arrive as a Poisson process, else all at once. TTFT: send to the first event "
      "with text; ITL: the gaps between a request's text events, pooled; TPOT: (latency - TTFT) / (output tokens - "
      "1) per request; output tokens from the server's usage. A request fails on a connection error, a status "
      "other than 200, --timeout-s, an error event, or a stream without 'data: [DONE]'; up to 5 reasons are "
      "listed. Exit 0 when every request completed, 1 otherwise (the report is printed either way).");
  command
      ->add_option("--url", flags->url,
                   "The server: http://HOST:PORT (/v1/completions is added; a path ending in /v1 or "
                   "/completions is completed or kept)")
      ->capture_default_str();
  command->add_option("--model", flags->model, "The model id the requests name")->required();
  command->add_option("--api-key", flags->api_key, "Send 'Authorization: Bearer KEY' (also from SLIPWAY_API_KEY)")
      ->envname("SLIPWAY_API_KEY");
  command->add_option("--clients", flags->clients, "Requests in flight at most, one thread and connection each")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command->add_option("--requests", flags->requests, "Requests in all")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  command->add_option("--rate", flags->rate, "Poisson arrivals at R requests/s (0: all released at once)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--prompt-tokens", flags->prompt_tokens, "Each request's own prompt tokens")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  command->add_option("--output-tokens", flags->output_tokens, "Tokens each request generates (max_tokens)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  command
      ->add_option("--length-spread", flags->length_spread,
                   "F: each request's prompt and output lengths drawn uniformly from [N*(1-F), N*(1+F)]")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  command
      ->add_option("--system-prompt-tokens", flags->system_prompt_tokens,
                   "A prefix of N tokens shared by every request, before its own (what prefix caching reuses)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))
      ->capture_default_str();
  command
      ->add_option("--vocab", flags->vocab,
                   "Prompt token ids are drawn from [10, N); default: the served model's vocabulary size, read from "
                   "/v1/models/MODEL")
      ->check(CLI::Range(11u, 1u << 24));
  command->add_option("--temperature", flags->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  command->add_option("--seed", flags->seed, "Seeds the prompts, lengths and arrival times")->capture_default_str();
  command->add_option("--timeout-s", flags->timeout_s, "Each request's limit, from send to [DONE], in seconds")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  run = [command, flags](const GlobalOptions& global) -> std::optional<int> {
    if (!command->parsed()) return std::nullopt;
    return run_llm_bench_serve(global, *flags);
  };
}

}  // namespace slipway::cli
