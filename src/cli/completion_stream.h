// One streamed OpenAI completion on its own connection, timed event by event: the client side of
// `slipway llm bench-serve` (llm_bench_serve.cpp).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"

namespace slipway::cli {

// Where the completion requests go: a --url resolved once. Immutable; shared by every client thread.
struct CompletionTarget {
  std::string host_header;  // HOST[:PORT], as the Host header carries it
  std::string target;       // the request target, …/v1/completions
  std::string display;      // http://HOST:PORT/TARGET, for messages and reports
  std::vector<std::pair<sockaddr_storage, socklen_t>> addresses;
};

// http://HOST[:PORT][/PATH] resolved (blocking), its path completed to /v1/completions: a base URL
// gets "/v1/completions", one ending in /v1 gets "/completions", one ending in /completions is
// kept. InvalidArgument naming the URL or host when it is not http:// or does not resolve.
Result<CompletionTarget> resolve_completion_target(const std::string& url);

// What one request measured. Times in seconds from the run's start.
struct CompletionRecord {
  bool completed = false;  // a 200 whose stream ended with `data: [DONE]` and no error event
  std::string failure;     // why not, in one line, when not
  double sent_s = 0, finished_s = 0;
  double ttft_ms = 0;  // send to the first event with text (the whole latency when none had any)
  double e2e_ms = 0;   // send to [DONE]
  // usage.completion_tokens (the text events when the server sent no usage); usage.prompt_tokens or 0.
  std::uint64_t output_tokens = 0, prompt_tokens = 0;
};

// Sends `request` (a whole HTTP/1.1 request) on a new connection and reads the answer as it
// arrives, to `data: [DONE]`, `timeout_s` after the send, or a failure (a connection error, a
// status other than 200, an error event, a stream cut short). The body may be chunked,
// Content-Length or close-delimited. The gaps in milliseconds between successive text events go
// onto `gaps`, at most `max_gaps` of them, and only when the request completes. Safe to call from
// many threads at once; each thread keeps its own JSON parser.
CompletionRecord send_completion(const CompletionTarget& target, const std::string& request, std::size_t max_gaps,
                                 std::chrono::steady_clock::time_point run_start, double timeout_s,
                                 std::vector<float>& gaps);

}  // namespace slipway::cli
