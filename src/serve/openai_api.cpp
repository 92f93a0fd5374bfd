// OpenAI's API over the engines: requests parsed and checked (every field's type and range, with
// OpenAI's error shape), prompts rendered and tokenized, generations submitted, and answers
// assembled whole or streamed as server-sent events, which stop when the client leaves.
#include <simdjson.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <ctime>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "slipway/serve.h"

namespace slipway::serve {

using namespace llm;  // NOLINT(google-build-using-namespace): the engine's vocabulary, throughout
namespace {

using simdjson::dom::element;

constexpr std::size_t kMaxChoices = 64;  // prompts times n, per request
constexpr std::size_t kMaxStops = 4;     // OpenAI's
constexpr std::size_t kMaxStopBytes = 256;
constexpr std::size_t kMaxMessages = 4096;
constexpr std::size_t kMaxLogitBias = 300;  // OpenAI's limit

http::Response api_error(int status, std::string_view message, std::string_view param = {},
                         std::string_view code = {}) {
  std::string_view type = status == 429   ? "rate_limit_error"
                          : status >= 500 ? "server_error"
                          : status == 401 ? "authentication_error"
                                          : "invalid_request_error";
  JsonWriter json;
  json.begin_object().key("error").begin_object().key("message").value(message).key("type").value(type);
  json.key("param");
  param.empty() ? json.null() : json.value(param);
  json.key("code");
  code.empty() ? json.null() : json.value(code);
  json.end_object().end_object();
  return http::Response{status, "application/json", json.take(), {}, {}};
}

// A request's failure: its status, message and the parameter at fault.
struct Refusal {
  int status = 400;
  std::string message, param, code;
};

// Text that is valid UTF-8: each byte that does not begin a valid character becomes U+FFFD (JSON
// strings must be UTF-8; a token may be part of a character).
std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (std::size_t length = utf8_character_length(text, i); length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::optional<double> number_of(element value) {
  double real = 0;
  std::int64_t integer = 0;
  std::uint64_t natural = 0;
  if (value.get(integer) == simdjson::SUCCESS) return static_cast<double>(integer);
  if (value.get(natural) == simdjson::SUCCESS) return static_cast<double>(natural);
  if (value.get(real) == simdjson::SUCCESS) return real;
  return std::nullopt;
}

// What one request asks for, checked.
struct Ask {
  const ServedLlm* model = nullptr;
  bool chat = false, stream = false, include_usage = false, ignore_eos = false;
  std::size_t n = 1;
  std::optional<std::size_t> max_tokens;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;  // per token logprobs wanted
  std::vector<std::vector<std::int32_t>> prompts;
  std::string cache_salt;  // vLLM's: only requests with the same salt share cached prompt blocks
};

class Parser {
 public:
  Parser(const std::vector<ServedLlm>& models, const std::vector<std::size_t>& max_token_bytes, bool chat)
      : models_(models), max_token_bytes_(max_token_bytes) {
    ask_.chat = chat;
  }

  std::optional<Refusal> parse(std::string_view body) {
    simdjson::padded_string padded(body);
    element root;
    if (parser_.parse(padded).get(root) != simdjson::SUCCESS) return Refusal{400, "the body is not valid JSON", {}, {}};
    if (root.get(object_) != simdjson::SUCCESS) return Refusal{400, "the body must be a JSON object", {}, {}};
    if (auto refused = model()) return refused;
    if (auto refused = options()) return refused;
    return ask_.chat ? messages() : prompt();
  }
  Ask& ask() { return ask_; }

 private:
  bool has(std::string_view key) {
    element value;
    return object_[key].get(value) == simdjson::SUCCESS && !value.is_null();
  }
  element at(std::string_view key) {
    element value;
    if (object_[key].get(value) != simdjson::SUCCESS) return {};
    return value;
  }
  static Refusal bad(std::string_view param, std::string message) {
    return Refusal{400, std::move(message), std::string(param), {}};
  }

  std::optional<Refusal> real(std::string_view key, float& out) {
    if (!has(key)) return std::nullopt;
    auto value = number_of(at(key));
    if (!value || !std::isfinite(*value)) return bad(key, fmt::format("'{}' must be a number", key));
    out = static_cast<float>(*value);
    return std::nullopt;
  }
  std::optional<Refusal> count(std::string_view key, std::size_t low, std::size_t high,
                               std::optional<std::size_t>& out) {
    if (!has(key)) return std::nullopt;
    auto value = number_of(at(key));
    if (!value || *value != std::floor(*value) || *value < static_cast<double>(low) ||
        *value > static_cast<double>(high)) {
      return bad(key, fmt::format("'{}' must be an integer from {} to {}", key, low, high));
    }
    out = static_cast<std::size_t>(*value);
    return std::nullopt;
  }
  std::optional<Refusal> flag(std::string_view key, bool& out) {
    if (!has(key)) return std::nullopt;
    if (at(key).get(out) != simdjson::SUCCESS) return bad(key, fmt::format("'{}' must be true or false", key));
    return std::nullopt;
  }

  std::optional<Refusal> model() {
    std::string_view name;
    if (!has("model") || at("model").get(name) != simdjson::SUCCESS) {
      return bad("model", "'model' is required: the name of a served model (GET /v1/models lists them)");
    }
    for (const auto& served : models_) {
      if (served.id == name) ask_.model = &served;
    }
    if (ask_.model == nullptr) {
      return Refusal{
          404, fmt::format("the model '{}' does not exist on this server", replace_invalid_utf8(name.substr(0, 200))),
          "model", "model_not_found"};
    }
    return std::nullopt;
  }

  std::optional<Refusal> options() {
    for (std::string_view unsupported : {"tools", "tool_choice", "functions", "function_call", "suffix"}) {
      if (has(unsupported)) return bad(unsupported, fmt::format("'{}' is not supported by this server", unsupported));
    }
    if (has("response_format")) {
      std::string_view type;
      element format = at("response_format");
      if (format["type"].get(type) != simdjson::SUCCESS || type != "text") {
        return bad("response_format", "only response_format {\"type\": \"text\"} is supported");
      }
    }
    bool echo = false;
    if (auto refused = flag("echo", echo)) return refused;
    if (echo) return bad("echo", "'echo' is not supported by this server");
    SamplingParams& sampling = ask_.sampling;
    for (auto [key, target] : {std::pair<std::string_view, float*>{"temperature", &sampling.temperature},
                               {"top_p", &sampling.top_p},
                               {"min_p", &sampling.min_p},
                               {"presence_penalty", &sampling.presence_penalty},
                               {"frequency_penalty", &sampling.frequency_penalty},
                               {"repetition_penalty", &sampling.repetition_penalty}}) {
      if (auto refused = real(key, *target)) return refused;
    }
    std::optional<std::size_t> n, top_k, best_of, max_tokens, top_logprobs;
    if (auto refused = count("n", 1, kMaxChoices, n)) return refused;
    ask_.n = n.value_or(1);
    if (auto refused = count("best_of", 1, kMaxChoices, best_of)) return refused;
    if (best_of && *best_of != ask_.n) return bad("best_of", "'best_of' other than n is not supported");
    if (auto refused = count("top_k", 0, 1 << 20, top_k)) return refused;
    sampling.top_k = top_k.value_or(0);
    for (std::string_view key : {"max_tokens", "max_completion_tokens"}) {
      if (auto refused = count(key, 1, std::size_t{1} << 24, max_tokens)) return refused;
    }
    ask_.max_tokens = max_tokens;
    if (has("seed")) {
      std::int64_t seed = 0;
      std::uint64_t natural = 0;
      element value = at("seed");
      if (value.get(seed) == simdjson::SUCCESS) {
        sampling.seed = static_cast<std::uint64_t>(seed);
      } else if (value.get(natural) == simdjson::SUCCESS) {
        sampling.seed = natural;
      } else {
        return bad("seed", "'seed' must be an integer");
      }
    }
    if (auto refused = stops()) return refused;
    if (auto refused = flag("stream", ask_.stream)) return refused;
    if (has("stream_options")) {
      bool usage = false;
      element options = at("stream_options");
      element include;
      if (options["include_usage"].get(include) == simdjson::SUCCESS && include.get(usage) != simdjson::SUCCESS) {
        return bad("stream_options", "'stream_options.include_usage' must be true or false");
      }
      ask_.include_usage = usage;
    }
    if (auto refused = flag("ignore_eos", ask_.ignore_eos)) return refused;
    if (has("cache_salt")) {
      std::string_view salt;
      if (at("cache_salt").get(salt) != simdjson::SUCCESS || salt.empty() || salt.size() > 1024) {
        return bad("cache_salt", "'cache_salt' must be a string of 1 to 1024 bytes");
      }
      ask_.cache_salt = salt;
    }
    if (ask_.chat) {
      if (auto refused = flag("logprobs", ask_.logprobs)) return refused;
      if (auto refused = count("top_logprobs", 0, kMaxTopLogprobs, top_logprobs)) return refused;
      if (top_logprobs && !ask_.logprobs) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    } else if (has("logprobs")) {
      if (auto refused = count("logprobs", 0, kMaxTopLogprobs, top_logprobs)) return refused;
      ask_.logprobs = true;
    }
    sampling.top_logprobs = top_logprobs.value_or(0);
    sampling.logprobs = ask_.logprobs;
    if (has("logit_bias")) {
      simdjson::dom::object biases;
      if (at("logit_bias").get(biases) != simdjson::SUCCESS) return bad("logit_bias", "'logit_bias' must be an object");
      const std::size_t vocabulary = ask_.model->engine->model().config().vocabulary;
      if (biases.size() > kMaxLogitBias) {
        return bad("logit_bias", fmt::format("'logit_bias' may hold at most {} tokens", kMaxLogitBias));
      }
      for (auto field : biases) {
        std::int64_t token = -1;
        auto [end, error] = std::from_chars(field.key.data(), field.key.data() + field.key.size(), token);
        auto bias = number_of(field.value);
        if (error != std::errc() || end != field.key.data() + field.key.size() || token < 0 ||
            static_cast<std::size_t>(token) >= vocabulary || !bias) {
          return bad("logit_bias", "'logit_bias' maps token ids of the vocabulary to numbers from -100 to 100");
        }
        for (const auto& [seen, _] : sampling.logit_bias) {
          if (seen == token) return bad("logit_bias", fmt::format("'logit_bias' names token {} twice", token));
        }
        sampling.logit_bias.emplace_back(static_cast<std::int32_t>(token), static_cast<float>(*bias));
      }
    }
    if (Status status = validate(sampling); !status.ok()) return bad({}, status.message());
    return std::nullopt;
  }

  std::optional<Refusal> stops() {
    if (!has("stop")) return std::nullopt;
    element value = at("stop");
    std::string_view text;
    auto add = [&](std::string_view stop) -> std::optional<Refusal> {
      if (stop.empty() || stop.size() > kMaxStopBytes) {
        return bad("stop", fmt::format("each stop string must be 1 to {} bytes", kMaxStopBytes));
      }
      ask_.stop.emplace_back(stop);
      return std::nullopt;
    };
    if (value.get(text) == simdjson::SUCCESS) return add(text);
    simdjson::dom::array list;
    if (value.get(list) != simdjson::SUCCESS) return bad("stop", "'stop' must be a string or a list of strings");
    for (element item : list) {
      if (item.get(text) != simdjson::SUCCESS) return bad("stop", "'stop' must be a string or a list of strings");
      if (auto refused = add(text)) return refused;
    }
    if (ask_.stop.size() > kMaxStops) return bad("stop", fmt::format("at most {} stop strings", kMaxStops));
    return std::nullopt;
  }

  std::optional<Refusal> prompt() {
    const Tokenizer& tokenizer = ask_.model->engine->tokenizer();
    if (!has("prompt")) return bad("prompt", "'prompt' is required");
    element value = at("prompt");
    std::string_view text;
    auto add_tokens = [&](simdjson::dom::array list) -> std::optional<Refusal> {
      std::vector<std::int32_t> tokens;
      const std::size_t vocabulary = ask_.model->engine->model().config().vocabulary;
      for (element item : list) {
        std::int64_t token = 0;
        if (item.get(token) != simdjson::SUCCESS || token < 0 || token > INT32_MAX) {
          return bad("prompt", "a token prompt must hold token ids");
        }
        // One message for every id past the end (not one per id): a client's mistaken vocabulary
        // is one cause, and GET /v1/models/MODEL says the size.
        if (static_cast<std::size_t>(token) >= vocabulary) {
          return bad("prompt", fmt::format("token ids must be below the model's vocabulary size, {}", vocabulary));
        }
        tokens.push_back(static_cast<std::int32_t>(token));
      }
      ask_.prompts.push_back(std::move(tokens));
      return std::nullopt;
    };
    if (value.get(text) == simdjson::SUCCESS) {
      if (auto refused = too_long(text.size())) return refused;
      ask_.prompts.push_back(tokenizer.encode(text, true, true));
    } else {
      simdjson::dom::array list;
      if (value.get(list) != simdjson::SUCCESS || list.size() == 0) {
        return bad("prompt", "'prompt' must be a string, a list of strings, or token ids");
      }
      element first = list.at(0);
      if (first.is_int64() || first.is_uint64()) {
        if (auto refused = add_tokens(list)) return refused;
      } else {
        for (element item : list) {
          simdjson::dom::array tokens;
          if (item.get(text) == simdjson::SUCCESS) {
            if (auto refused = too_long(text.size())) return refused;
            ask_.prompts.push_back(tokenizer.encode(text, true, true));
          } else if (item.get(tokens) == simdjson::SUCCESS) {
            if (auto refused = add_tokens(tokens)) return refused;
          } else {
            return bad("prompt", "'prompt' must be a string, a list of strings, or token ids");
          }
          if (ask_.prompts.size() > kMaxChoices) break;
        }
      }
    }
    return check_choices();
  }

  std::optional<Refusal> messages() {
    simdjson::dom::array list;
    if (!has("messages") || at("messages").get(list) != simdjson::SUCCESS || list.size() == 0) {
      return bad("messages", "'messages' must be a non-empty list of {role, content}");
    }
    if (list.size() > kMaxMessages) return bad("messages", fmt::format("at most {} messages", kMaxMessages));
    std::vector<ChatMessage> chat;
    for (element item : list) {
      ChatMessage message;
      std::string_view role, text;
      if (item["role"].get(role) != simdjson::SUCCESS) return bad("messages", "each message needs a 'role' string");
      message.role = std::string(role);
      element content;
      if (item["content"].get(content) != simdjson::SUCCESS || content.is_null()) {
        // An assistant turn may carry no content (OpenAI allows it with tool calls).
      } else if (content.get(text) == simdjson::SUCCESS) {
        message.content = std::string(text);
      } else {
        simdjson::dom::array parts;
        if (content.get(parts) != simdjson::SUCCESS)
          return bad("messages", "a message's content must be a string or text parts");
        for (element part : parts) {
          std::string_view type;
          if (part["type"].get(type) != simdjson::SUCCESS || type != "text" ||
              part["text"].get(text) != simdjson::SUCCESS) {
            return bad("messages", "only text content parts are supported");
          }
          message.content += text;
        }
      }
      chat.push_back(std::move(message));
    }
    std::size_t bytes = 0;
    for (const auto& message : chat) bytes += message.content.size();
    if (auto refused = too_long(bytes)) return refused;
    const Engine& engine = *ask_.model->engine;
    auto rendered = render_chat(engine.model().file(), engine.tokenizer(), chat, true);
    if (!rendered.ok()) return bad("messages", rendered.status().message());
    // Every format writes BOS itself where the model wants one ("<s>[INST]", "<|begin_of_text|>").
    ask_.prompts.push_back(engine.tokenizer().encode(*rendered, false, true));
    return check_choices();
  }

  std::optional<Refusal> check_choices() {
    if (ask_.prompts.size() * ask_.n > kMaxChoices) {
      return bad("n", fmt::format("at most {} choices (prompts times n) per request", kMaxChoices));
    }
    const std::size_t context = ask_.model->engine->context();
    for (const auto& tokens : ask_.prompts) {
      if (tokens.empty()) return bad("prompt", "the prompt has no tokens");
      if (tokens.size() >= context) {
        return Refusal{400,
                       fmt::format("the prompt has {} tokens; the model's context holds {} with the reply",
                                   tokens.size(), context),
                       ask_.chat ? "messages" : "prompt", "context_length_exceeded"};
      }
    }
    return std::nullopt;
  }

  // A text of more bytes than this cannot fit the context: refused before it is tokenized.
  std::optional<Refusal> too_long(std::size_t bytes) {
    const std::size_t index = static_cast<std::size_t>(ask_.model - models_.data());
    const std::size_t context = ask_.model->engine->context();
    if (bytes / std::max<std::size_t>(max_token_bytes_[index], 1) < context) return std::nullopt;
    return Refusal{
        400, fmt::format("the prompt's {} bytes are more tokens than the model's context of {} holds", bytes, context),
        ask_.chat ? "messages" : "prompt", "context_length_exceeded"};
  }

  const std::vector<ServedLlm>& models_;
  const std::vector<std::size_t>& max_token_bytes_;
  simdjson::dom::parser parser_;
  simdjson::dom::object object_;
  Ask ask_;
};

// One choice's answer as it grows.
struct Choice {
  std::string text;
  std::vector<SampledToken> tokens;  // kept only when logprobs are wanted
  std::vector<std::size_t> text_offsets;
  std::string finish_reason;
  bool started = false;  // a chat stream's first delta (with the role) went out
};

// One request in flight: its choices, and where its answer goes.
struct Job : std::enable_shared_from_this<Job> {
  Ask ask;
  std::string id, model_id;
  std::int64_t created = 0;
  std::function<bool()> client_gone;
  http::Respond respond;
  std::mutex mutex;
  std::vector<Choice> choices;
  std::size_t remaining = 0, prompt_tokens = 0, completion_tokens = 0;
  std::string failure;
  int failure_status = 500;
  std::shared_ptr<http::ResponseStream> stream;
  std::string pending;     // stream chunks written before the stream started
  bool abandoned = false;  // the stream refused a chunk: its client left or stopped reading

  // Whether the client has gone (under the mutex): its generations stop.
  bool gone() const { return abandoned || (stream ? stream->client_gone() : client_gone()); }

  const Tokenizer& tokenizer() const { return ask.model->engine->tokenizer(); }

  void write_token_logprobs(JsonWriter& json, const SampledToken& token) const {
    std::string piece = tokenizer().piece(token.chosen.token, true);
    json.begin_object().key("token").value(replace_invalid_utf8(piece)).key("logprob").value(token.chosen.logprob);
    json.key("bytes").begin_array();
    for (char byte : piece) json.value(static_cast<std::int64_t>(static_cast<unsigned char>(byte)));
    json.end_array().key("top_logprobs").begin_array();
    for (const auto& alternative : token.top) {
      std::string text = tokenizer().piece(alternative.token, true);
      json.begin_object().key("token").value(replace_invalid_utf8(text)).key("logprob").value(alternative.logprob);
      json.key("bytes").begin_array();
      for (char byte : text) json.value(static_cast<std::int64_t>(static_cast<unsigned char>(byte)));
      json.end_array().end_object();
    }
    json.end_array().end_object();
  }

  // logprobs for tokens [first, end) of a choice, in the endpoint's shape.
  void write_logprobs(JsonWriter& json, const Choice& choice, std::size_t first, std::size_t end) const {
    if (!ask.logprobs) {
      json.null();
      return;
    }
    if (ask.chat) {
      json.begin_object().key("content").begin_array();
      for (std::size_t i = first; i < end; ++i) write_token_logprobs(json, choice.tokens[i]);
      json.end_array().end_object();
      return;
    }
    json.begin_object().key("tokens").begin_array();
    for (std::size_t i = first; i < end; ++i)
      json.value(replace_invalid_utf8(tokenizer().piece(choice.tokens[i].chosen.token, true)));
    json.end_array().key("token_logprobs").begin_array();
    for (std::size_t i = first; i < end; ++i) json.value(choice.tokens[i].chosen.logprob);
    json.end_array().key("top_logprobs").begin_array();
    for (std::size_t i = first; i < end; ++i) {
      json.begin_object();
      for (const auto& alternative : choice.tokens[i].top) {
        json.key(replace_invalid_utf8(tokenizer().piece(alternative.token, true))).value(alternative.logprob);
      }
      json.end_object();
    }
    json.end_array().key("text_offset").begin_array();
    for (std::size_t i = first; i < end; ++i) json.value(static_cast<std::uint64_t>(choice.text_offsets[i]));
    json.end_array().end_object();
  }

  void write_usage(JsonWriter& json) const {
    json.key("usage").begin_object().key("prompt_tokens").value(static_cast<std::uint64_t>(prompt_tokens));
    json.key("completion_tokens").value(static_cast<std::uint64_t>(completion_tokens));
    json.key("total_tokens").value(static_cast<std::uint64_t>(prompt_tokens + completion_tokens)).end_object();
  }

  void begin_chunk(JsonWriter& json) const {
    json.begin_object().key("id").value(id).key("object").value(ask.chat ? "chat.completion.chunk" : "text_completion");
    json.key("created").value(created).key("model").value(model_id);
  }

  // One streamed chunk for choice `index`: its new text and tokens, or its end.
  // A chat stream opens each choice with a delta of the role and empty content, as OpenAI's does.
  std::string chunk(std::size_t index, std::string_view text, std::size_t first_token, std::size_t end_token,
                    std::string_view finish_reason) {
    Choice& choice = choices[index];
    std::string opening;
    if (ask.chat && !choice.started) {
      choice.started = true;
      opening = chunk(index, {}, 0, 0, {});
    }
    JsonWriter json;
    begin_chunk(json);
    json.key("choices").begin_array().begin_object().key("index").value(static_cast<std::uint64_t>(index));
    if (ask.chat) {
      json.key("delta").begin_object();
      if (opening.empty() && first_token == end_token && text.empty() && finish_reason.empty()) {
        json.key("role").value("assistant").key("content").value("");
      } else if (!text.empty()) {
        json.key("content").value(replace_invalid_utf8(text));
      }
      json.end_object();
    } else {
      json.key("text").value(replace_invalid_utf8(text));
    }
    json.key("logprobs");
    if (end_token > first_token) {
      write_logprobs(json, choice, first_token, end_token);
    } else {
      json.null();
    }
    json.key("finish_reason");
    finish_reason.empty() ? json.null() : json.value(finish_reason);
    json.end_object().end_array();
    if (ask.include_usage) json.key("usage").null();
    json.end_object();
    return opening + "data: " + json.take() + "\n\n";
  }

  void emit(std::string event) {  // under the mutex
    if (stream) {
      abandoned = abandoned || !stream->write(std::move(event));
    } else {
      pending += event;
    }
  }

  bool on_token(std::size_t index, const GenerationEvent& event) {
    std::lock_guard lock(mutex);
    Choice& choice = choices[index];
    if (ask.logprobs) {
      choice.tokens.push_back(event.sampled);
      choice.text_offsets.push_back(choice.text.size());
    }
    choice.text += event.text;
    if (ask.stream && (!event.text.empty() || ask.logprobs)) {
      std::size_t count = choice.tokens.size();
      emit(chunk(index, event.text, ask.logprobs ? count - 1 : 0, ask.logprobs ? count : 0, {}));
    }
    return !gone();
  }

  void on_finish(std::size_t index, const GenerationResult& result) {
    std::unique_lock lock(mutex);
    Choice& choice = choices[index];
    choice.text += result.text;
    choice.finish_reason = std::string(finish_reason_name(result.reason));
    completion_tokens += result.completion_tokens;
    // An error, or a cancellation the server made (its drain deadline), is the request's answer; a
    // cancellation for a client that left answers nobody.
    if (result.reason == FinishReason::kError || (result.reason == FinishReason::kCancelled && !result.error.empty())) {
      failure = result.error;
      failure_status = result.reason == FinishReason::kError ? 500 : 503;
    }
    if (ask.stream) {
      if (!result.text.empty()) emit(chunk(index, result.text, 0, 0, {}));
      if (result.reason == FinishReason::kStop || result.reason == FinishReason::kLength) {
        emit(chunk(index, {}, 0, 0, choice.finish_reason));
      }
    }
    if (--remaining > 0) return;
    if (ask.stream) {
      if (!failure.empty()) {
        emit("data: " + api_error(failure_status, failure).body + "\n\n");
      } else if (ask.include_usage) {
        JsonWriter json;
        begin_chunk(json);
        json.key("choices").begin_array().end_array();
        write_usage(json);
        json.end_object();
        emit("data: " + json.take() + "\n\n");
      }
      emit("data: [DONE]\n\n");
      if (stream) stream->finish();
      return;
    }
    http::Response response = failure.empty() ? answer() : api_error(failure_status, failure);
    lock.unlock();
    respond(std::move(response));
  }

  http::Response answer() const {
    JsonWriter json;
    json.begin_object().key("id").value(id).key("object").value(ask.chat ? "chat.completion" : "text_completion");
    json.key("created").value(created).key("model").value(model_id).key("choices").begin_array();
    for (std::size_t index = 0; index < choices.size(); ++index) {
      const Choice& choice = choices[index];
      json.begin_object().key("index").value(static_cast<std::uint64_t>(index));
      if (ask.chat) {
        json.key("message")
            .begin_object()
            .key("role")
            .value("assistant")
            .key("content")
            .value(replace_invalid_utf8(choice.text));
        json.end_object();
      } else {
        json.key("text").value(replace_invalid_utf8(choice.text));
      }
      json.key("logprobs");
      write_logprobs(json, choice, 0, choice.tokens.size());
      json.key("finish_reason").value(choice.finish_reason).end_object();
    }
    json.end_array();
    write_usage(json);
    json.end_object();
    return http::Response{200, "application/json", json.take(), {}, {}};
  }
};

std::string request_id(std::string_view prefix) {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t kSalt = std::random_device{}() * 0x9E3779B97F4A7C15ULL;
  return fmt::format("{}{:016x}{:08x}", prefix, kSalt, counter.fetch_add(1));
}

void list_models(const std::vector<ServedLlm>& models, std::string_view only, const http::Respond& respond) {
  JsonWriter json;
  auto write_model = [&](const ServedLlm& model) {
    json.begin_object().key("id").value(model.id).key("object").value("model").key("created").value(model.created);
    json.key("owned_by")
        .value("slipway")
        .key("context_length")
        .value(static_cast<std::uint64_t>(model.engine->context()))
        .key("vocab_size")
        .value(static_cast<std::uint64_t>(model.engine->model().config().vocabulary));
    json.end_object();
  };
  if (!only.empty()) {
    for (const auto& model : models) {
      if (model.id == only) {
        write_model(model);
        return respond(http::Response{200, "application/json", json.take(), {}, {}});
      }
    }
    return respond(api_error(
        404, fmt::format("the model '{}' does not exist on this server", replace_invalid_utf8(only.substr(0, 200))),
        "model", "model_not_found"));
  }
  json.begin_object().key("object").value("list").key("data").begin_array();
  for (const auto& model : models) write_model(model);
  json.end_array().end_object();
  respond(http::Response{200, "application/json", json.take(), {}, {}});
}

}  // namespace

http::Response OpenAiApi::error(int status, std::string_view message) { return api_error(status, message); }

const std::vector<ProtocolRoute>& OpenAiApi::routes() {
  // Under `slipway serve --auth` these take the predict role, as inference does; `slipway llm
  // serve --api-key` takes its one key.
  static const std::vector<ProtocolRoute> kRoutes = {
      {"GET", "/v1/models", Role::kPredict, "The LLMs served (OpenAI's list models)"},
      {"GET", "/v1/models/{model}", Role::kPredict, "One LLM (OpenAI's retrieve model)"},
      {"POST", "/v1/completions", Role::kPredict,
       "A completion of a prompt, streamed as server-sent events when asked"},
      {"POST", "/v1/chat/completions", Role::kPredict, "A chat completion, streamed as server-sent events when asked"},
  };
  return kRoutes;
}

OpenAiApi::OpenAiApi(std::vector<ServedLlm> models) : models_(std::move(models)) {
  for (const auto& model : models_) {
    const Tokenizer& tokenizer = model.engine->tokenizer();
    std::size_t longest = 1;
    for (std::size_t token = 0; token < tokenizer.size(); ++token) {
      longest = std::max(longest, tokenizer.piece(static_cast<std::int32_t>(token), true).size());
    }
    max_token_bytes_.push_back(longest);
  }
}

void OpenAiApi::cancel_all(const std::string& reason) const {
  for (const auto& model : models_) model.engine->cancel_all(reason);
}

void OpenAiApi::shutdown() const {
  for (const auto& model : models_) model.engine->shutdown();
}

void OpenAiApi::handle(const http::Request& request, const http::Respond& respond) const {
  const std::string_view path = request.path;
  if (path == "/v1/models" || path.starts_with("/v1/models/")) {
    if (request.method != "GET") return respond(api_error(405, "use GET for " + std::string(path)));
    return list_models(models_, path.size() > 11 ? path.substr(11) : std::string_view{}, respond);
  }
  const bool chat = path == "/v1/chat/completions";
  if (!chat && path != "/v1/completions") {
    return respond(api_error(404, "no route for " + replace_invalid_utf8(path.substr(0, 200)) +
                                      " (this server has /v1/models, /v1/completions and /v1/chat/completions)"));
  }
  if (request.method != "POST") return respond(api_error(405, "use POST for " + std::string(path)));
  Parser parser(models_, max_token_bytes_, chat);
  if (auto refused = parser.parse(request.body)) {
    return respond(api_error(refused->status, refused->message, refused->param, refused->code));
  }
  auto job = std::make_shared<Job>();
  job->ask = std::move(parser.ask());
  const Ask& ask = job->ask;
  job->id = request_id(chat ? "chatcmpl-" : "cmpl-");
  job->model_id = ask.model->id;
  job->created = static_cast<std::int64_t>(std::time(nullptr));
  job->client_gone = request.client_gone;
  job->respond = respond;
  job->choices.resize(ask.prompts.size() * ask.n);
  job->remaining = job->choices.size();
  Engine& engine = *ask.model->engine;
  for (const auto& prompt : ask.prompts) job->prompt_tokens += prompt.size();
  // Tenants never share cached prompts: the salt covers the caller's credentials and its own.
  std::string tenant(request.header("authorization"));
  tenant += '\0';
  tenant += ask.cache_salt;
  const std::uint64_t salt = std::hash<std::string>{}(tenant);
  std::vector<GenerationRequest> generations;
  for (std::size_t index = 0; index < job->choices.size(); ++index) {
    GenerationRequest generation;
    generation.prompt = ask.prompts[index / ask.n];
    generation.max_tokens = ask.max_tokens.value_or(chat ? engine.context() : 16);
    generation.sampling = ask.sampling;
    if (ask.sampling.seed) generation.sampling.seed = *ask.sampling.seed + index;  // n choices differ, reproducibly
    generation.stop = ask.stop;
    generation.ignore_eos = ask.ignore_eos;
    generation.cache_salt = salt;
    generation.on_token = [job, index](const GenerationEvent& event) { return job->on_token(index, event); };
    generation.on_finish = [job, index](const GenerationResult& result) { job->on_finish(index, result); };
    generation.cancelled = [job] {
      std::lock_guard lock(job->mutex);
      return job->gone();
    };
    generations.push_back(std::move(generation));
  }
  // Submitted under the job's lock, so no answer goes out before every choice is queued; all
  // choices are queued or none.
  std::unique_lock lock(job->mutex);
  if (Status submitted = engine.submit(std::move(generations)); !submitted.ok()) {
    lock.unlock();
    int status = submitted.code() == StatusCode::kResourceExhausted ? 429
                 : submitted.code() == StatusCode::kUnavailable     ? 503
                                                                    : 400;
    http::Response refused = api_error(status, submitted.message());
    if (status != 400) refused.headers.emplace_back("Retry-After", "1");
    return respond(std::move(refused));
  }
  if (!ask.stream) return;
  http::Response response{200, "text/event-stream", {}, {{"Cache-Control", "no-cache"}}, {}};
  response.start_stream = [job](std::shared_ptr<http::ResponseStream> stream) {
    std::lock_guard lock(job->mutex);
    job->stream = std::move(stream);
    if (!job->pending.empty()) job->stream->write(std::exchange(job->pending, {}));
    if (job->remaining == 0) job->stream->finish();
  };
  lock.unlock();
  respond(std::move(response));
}

std::string OpenAiApi::metrics_text() const {
  std::string out =
      "# HELP slipway_llm_prompt_tokens_total Prompt tokens processed.\n# TYPE slipway_llm_prompt_tokens_total "
      "counter\n"
      "# HELP slipway_llm_generation_tokens_total Tokens generated.\n# TYPE slipway_llm_generation_tokens_total "
      "counter\n"
      "# HELP slipway_llm_requests_running Sequences decoding now.\n# TYPE slipway_llm_requests_running gauge\n"
      "# HELP slipway_llm_requests_waiting Requests queued for a free sequence.\n# TYPE slipway_llm_requests_waiting "
      "gauge\n"
      "# HELP slipway_llm_requests_finished_total Generations finished, by reason.\n"
      "# TYPE slipway_llm_requests_finished_total counter\n"
      "# HELP slipway_llm_time_to_first_token_seconds From submission to the first generated token.\n"
      "# TYPE slipway_llm_time_to_first_token_seconds histogram\n"
      "# HELP slipway_llm_inter_token_latency_seconds Between consecutive tokens of a sequence.\n"
      "# TYPE slipway_llm_inter_token_latency_seconds histogram\n";
  for (const auto& model : models_) out += model.engine->metrics_text(model.id);
  return out;
}

}  // namespace slipway::serve
