// The client side of `slipway llm bench-serve`: one connection per request, a non-blocking socket
// under poll() so that every step honours the request's deadline, and the response parsed as it
// arrives: the head, the chunked, Content-Length or close-delimited body, and the body's
// server-sent events, each stamped with the time its last bytes were received.
#include "cli/completion_stream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <system_error>
#include <variant>

#include <fmt/format.h>
#include <simdjson.h>

#include "slipway/http.h"

namespace slipway::cli {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// One response, read as it arrives.

// An HTTP/1.1 response fed in pieces: the head, then the body (chunked, Content-Length or up to
// the close). A 200's body is cut into server-sent events, each event's data (its `data:` lines
// joined by '\n') handed to `on_event`; another status's body start is kept for the message.
class StreamingResponse {
 public:
  using OnEvent = std::function<void(std::string_view data)>;

  // False, with error() set, when the bytes are not an HTTP response.
  bool feed(std::string_view bytes, const OnEvent& on_event) {
    raw_.append(bytes);
    bool fine = advance(on_event);
    raw_.erase(0, consumed_);
    consumed_ = 0;
    return fine;
  }
  // The peer closed: a close-delimited body ends; anything else was cut short.
  void close() {
    if (state_ == State::kIdentity && !content_length_) state_ = State::kDone;
  }
  bool head_done() const { return state_ != State::kHead; }
  bool body_done() const { return state_ == State::kDone; }
  int status() const { return status_; }
  const std::string& error() const { return error_; }
  const std::string& error_body() const { return error_body_; }

 private:
  enum class State { kHead, kChunkSize, kChunkData, kChunkEnd, kTrailers, kIdentity, kDone };
  static constexpr std::size_t kMaxHead = 64 << 10;
  static constexpr std::size_t kMaxErrorBody = 2048;

  std::string_view unread() const { return std::string_view(raw_).substr(consumed_); }

  // The next CRLF-terminated line of the unread bytes, consumed; nullopt while it is incomplete.
  std::optional<std::string_view> take_line() {
    std::string_view rest = unread();
    std::size_t end = rest.find("\r\n");
    if (end == std::string_view::npos) return std::nullopt;
    consumed_ += end + 2;
    return rest.substr(0, end);
  }

  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  bool advance(const OnEvent& on_event) {
    for (;;) {
      switch (state_) {
        case State::kHead: {
          std::size_t end = unread().find("\r\n\r\n");
          if (end == std::string_view::npos) {
            return unread().size() <= kMaxHead || fail("the response head is longer than 64 KiB");
          }
          if (!parse_head(unread().substr(0, end + 2))) return false;
          consumed_ += end + 4;
          break;
        }
        case State::kChunkSize: {
          auto line = take_line();
          if (!line) return unread().size() <= 1024 || fail("a chunk size line is longer than 1 KiB");
          std::string_view digits = line->substr(0, line->find(';'));
          std::size_t size = 0;
          auto parsed = std::from_chars(digits.data(), digits.data() + digits.size(), size, 16);
          if (digits.empty() || parsed.ec != std::errc()) return fail("a chunk size is not a hexadecimal number");
          chunk_left_ = size;
          state_ = size == 0 ? State::kTrailers : State::kChunkData;
          break;
        }
        case State::kChunkData: {
          std::string_view piece = unread().substr(0, chunk_left_);
          if (piece.empty()) return true;
          consumed_ += piece.size();
          chunk_left_ -= piece.size();
          deliver(piece, on_event);
          if (chunk_left_ == 0) state_ = State::kChunkEnd;
          break;
        }
        case State::kChunkEnd: {
          auto line = take_line();
          if (!line) return unread().size() < 2 || fail("a chunk does not end with CRLF");
          if (!line->empty()) return fail("a chunk is longer than its size");
          state_ = State::kChunkSize;
          break;
        }
        case State::kTrailers: {
          auto line = take_line();
          if (!line) return true;
          if (line->empty()) state_ = State::kDone;
          break;
        }
        case State::kIdentity: {
          std::string_view piece = unread();
          if (content_length_) piece = piece.substr(0, *content_length_ - body_seen_);
          consumed_ += piece.size();
          body_seen_ += piece.size();
          if (!piece.empty()) deliver(piece, on_event);
          if (content_length_ && body_seen_ == *content_length_) state_ = State::kDone;
          return true;
        }
        case State::kDone:
          return true;
      }
    }
  }

  static bool equals_ignoring_case(std::string_view left, std::string_view right) {
    return left.size() == right.size() && std::equal(left.begin(), left.end(), right.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
  }

  bool parse_head(std::string_view head) {
    std::size_t line_end = head.find("\r\n");
    std::string_view status_line = head.substr(0, line_end);
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
      return fail("the server's answer is not HTTP/1.x");
    }
    auto parsed = std::from_chars(status_line.data() + 9, status_line.data() + 12, status_);
    if (parsed.ec != std::errc()) return fail("the response's status line has no status code");
    bool chunked = false;
    for (std::size_t at = line_end + 2; at < head.size();) {
      std::size_t end = head.find("\r\n", at);
      std::string_view line = head.substr(at, end - at);
      at = end + 2;
      std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = line.substr(0, colon);
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      if (equals_ignoring_case(name, "transfer-encoding")) {
        chunked = value.size() >= 7 && equals_ignoring_case(value.substr(value.size() - 7), "chunked");
      } else if (equals_ignoring_case(name, "content-length")) {
        std::size_t length = 0;
        if (std::from_chars(value.data(), value.data() + value.size(), length).ec != std::errc()) {
          return fail("the response's Content-Length is not a number");
        }
        content_length_ = length;
      }
    }
    if (chunked) {
      state_ = State::kChunkSize;
    } else {
      state_ = content_length_ == std::size_t{0} ? State::kDone : State::kIdentity;
    }
    return true;
  }

  void deliver(std::string_view body, const OnEvent& on_event) {
    if (status_ != 200) {
      error_body_.append(body.substr(0, kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size())));
      return;
    }
    events_.append(body);
    std::size_t start = 0;
    for (std::size_t end; (end = events_.find('\n', start)) != std::string::npos; start = end + 1) {
      std::string_view line(events_.data() + start, end - start);
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (line.empty()) {
        if (has_data_) on_event(data_);
        data_.clear();
        has_data_ = false;
      } else if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        if (has_data_) data_ += '\n';
        data_.append(line);
        has_data_ = true;
      }  // comments (':'), event:, id: and retry: lines say nothing measured here
    }
    events_.erase(0, start);
  }

  State state_ = State::kHead;
  std::string raw_;  // received bytes not yet consumed (from consumed_ on)
  std::size_t consumed_ = 0;
  int status_ = 0;
  std::optional<std::size_t> content_length_;
  std::size_t body_seen_ = 0;
  std::size_t chunk_left_ = 0;
  std::string events_;  // body bytes of the event being received
  std::string data_;
  bool has_data_ = false;
  std::string error_, error_body_;
};

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on `fd`; false when the deadline passes first, or poll itself fails (so a
// failing poll ends the request instead of spinning on EAGAIN until the deadline).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, static_cast<int>(std::min<std::int64_t>(left, 60'000)));
    if (ready > 0) return true;  // a socket error shows in the next call
    if (ready < 0 && errno != EINTR) return false;
  }
}

std::string errno_text(int code) { return std::error_code(code, std::generic_category()).message(); }

// A connected non-blocking socket, or the reason there is none.
std::variant<std::unique_ptr<Socket>, std::string> connect_to(const CompletionTarget& target,
                                                              Clock::time_point deadline) {
  std::string reason;
  for (const auto& [address, length] : target.addresses) {
    auto socket =
        std::make_unique<Socket>(::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
    if (socket->fd() < 0) return "cannot open a socket: " + errno_text(errno);
    int code = 0;
    if (::connect(socket->fd(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      code = errno;
      if (code == EINPROGRESS) {
        if (!wait_for(socket->fd(), POLLOUT, deadline)) return std::string("timed out connecting");
        socklen_t size = sizeof(code);
        ::getsockopt(socket->fd(), SOL_SOCKET, SO_ERROR, &code, &size);
      }
    }
    if (code == 0) {
      int on = 1;
      ::setsockopt(socket->fd(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      return socket;
    }
    reason = fmt::format("cannot connect to {}: {}", target.host_header, errno_text(code));
  }
  return reason;
}

// What a request's events have said so far.
struct StreamTally {
  bool done = false;  // data: [DONE]
  std::string failure;
  std::size_t text_events = 0;
  Clock::time_point first_text{}, last_text{};
  std::optional<std::uint64_t> completion_tokens, prompt_tokens;
};

// Reads one event's JSON: text, usage, or an error the server sent inside the stream.
void read_event(std::string_view data, Clock::time_point received, std::size_t max_gaps, simdjson::dom::parser& parser,
                StreamTally& tally, std::vector<float>& gaps) {
  if (data == "[DONE]") {
    tally.done = true;
    return;
  }
  simdjson::dom::element root;
  if (parser.parse(data.data(), data.size()).get(root) != simdjson::SUCCESS) {
    if (tally.failure.empty()) tally.failure = fmt::format("an event is not JSON: '{:.60}'", data);
    return;
  }
  simdjson::dom::element error;
  if (root["error"].get(error) == simdjson::SUCCESS && !error.is_null()) {
    std::string_view message;
    if (error["message"].get(message) != simdjson::SUCCESS) message = "(no message)";
    if (tally.failure.empty()) tally.failure = fmt::format("the stream reported an error: {:.200}", message);
    return;
  }
  bool has_text = false;
  simdjson::dom::array choices;
  if (root["choices"].get(choices) == simdjson::SUCCESS) {
    for (simdjson::dom::element choice : choices) {
      std::string_view text;
      simdjson::dom::element logprobs;
      has_text = has_text || (choice["text"].get(text) == simdjson::SUCCESS && !text.empty()) ||
                 (choice["delta"]["content"].get(text) == simdjson::SUCCESS && !text.empty()) ||
                 (choice["logprobs"].get(logprobs) == simdjson::SUCCESS && !logprobs.is_null());
    }
  }
  if (has_text) {
    if (tally.text_events == 0) {
      tally.first_text = received;
    } else if (tally.text_events <= max_gaps) {
      gaps.push_back(static_cast<float>(std::chrono::duration<double, std::milli>(received - tally.last_text).count()));
    }
    tally.last_text = received;
    ++tally.text_events;
  }
  simdjson::dom::object usage;
  if (root["usage"].get(usage) == simdjson::SUCCESS) {
    std::uint64_t count = 0;
    if (usage["completion_tokens"].get(count) == simdjson::SUCCESS) tally.completion_tokens = count;
    if (usage["prompt_tokens"].get(count) == simdjson::SUCCESS) tally.prompt_tokens = count;
  }
}

// An error response's message: OpenAI's {"error":{"message"}}, else the body's start.
std::string error_message(const std::string& body, simdjson::dom::parser& parser) {
  simdjson::dom::element root;
  std::string_view message;
  if (parser.parse(body).get(root) == simdjson::SUCCESS && root["error"]["message"].get(message) == simdjson::SUCCESS) {
    return fmt::format("{:.200}", message);
  }
  return body.empty() ? std::string("(no body)") : fmt::format("{:.200}", body);
}

}  // namespace

Result<CompletionTarget> resolve_completion_target(const std::string& url) {
  SLIPWAY_ASSIGN_OR_RETURN(http::Url parsed, http::parse_url(url));
  CompletionTarget target;
  std::string path = parsed.target;
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.ends_with("/completions")) {
    target.target = path;
  } else if (path.ends_with("/v1")) {
    target.target = path + "/completions";
  } else {
    target.target = path + "/v1/completions";
  }
  bool ipv6 = parsed.host.find(':') != std::string::npos;
  std::string host = ipv6 ? "[" + parsed.host + "]" : parsed.host;
  target.host_header = parsed.port == 80 ? host : fmt::format("{}:{}", host, parsed.port);
  target.display = fmt::format("http://{}:{}{}", host, parsed.port, target.target);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int code = ::getaddrinfo(parsed.host.c_str(), std::to_string(parsed.port).c_str(), &hints, &found);
  if (code != 0) return invalid_argument(fmt::format("cannot resolve '{}': {}", parsed.host, ::gai_strerror(code)));
  for (addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, entry->ai_addr, entry->ai_addrlen);
    target.addresses.emplace_back(address, entry->ai_addrlen);
  }
  ::freeaddrinfo(found);
  if (target.addresses.empty()) return invalid_argument(fmt::format("'{}' resolves to no address", parsed.host));
  return target;
}

CompletionRecord send_completion(const CompletionTarget& target, const std::string& request, std::size_t max_gaps,
                                 Clock::time_point run_start, double timeout_s, std::vector<float>& gaps) {
  thread_local simdjson::dom::parser parser;
  CompletionRecord record;
  Clock::time_point sent = Clock::now();
  auto deadline = sent + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto seconds = [&](Clock::time_point at) { return std::chrono::duration<double>(at - run_start).count(); };
  record.sent_s = seconds(sent);
  auto finish = [&](std::string failure) {
    record.finished_s = seconds(Clock::now());
    record.failure = std::move(failure);
    return record;
  };
  auto connected = connect_to(target, deadline);
  if (auto* reason = std::get_if<std::string>(&connected)) return finish(*reason);
  const Socket& socket = *std::get<std::unique_ptr<Socket>>(connected);

  for (std::size_t written = 0; written < request.size();) {
    ssize_t sent_bytes = ::send(socket.fd(), request.data() + written, request.size() - written, MSG_NOSIGNAL);
    if (sent_bytes > 0) {
      written += static_cast<std::size_t>(sent_bytes);
    } else if (sent_bytes < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(socket.fd(), POLLOUT, deadline))
        return finish(fmt::format("timed out after {} s sending", timeout_s));
    } else {
      return finish("sending failed: " + errno_text(errno));
    }
  }

  StreamingResponse response;
  StreamTally tally;
  const std::size_t gaps_before = gaps.size();
  auto failed = [&](std::string failure) {
    gaps.resize(gaps_before);
    return finish(std::move(failure));
  };
  Clock::time_point received = sent;
  auto on_event = [&](std::string_view data) { read_event(data, received, max_gaps, parser, tally, gaps); };
  std::array<char, 16384> buffer{};
  while (!tally.done && !response.body_done() && tally.failure.empty()) {
    if (!wait_for(socket.fd(), POLLIN, deadline)) return failed(fmt::format("timed out after {} s", timeout_s));
    ssize_t count = ::recv(socket.fd(), buffer.data(), buffer.size(), 0);
    received = Clock::now();
    if (count < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (count < 0) return failed("receiving failed: " + errno_text(errno));
    if (count == 0) {
      response.close();
      break;
    }
    if (!response.feed(std::string_view(buffer.data(), static_cast<std::size_t>(count)), on_event)) {
      return failed(response.error());
    }
  }
  if (!response.head_done()) return failed("the server closed the connection without answering");
  if (response.status() != 200) {
    return failed(fmt::format("HTTP {}: {}", response.status(), error_message(response.error_body(), parser)));
  }
  if (!tally.failure.empty()) return failed(tally.failure);
  if (!tally.done) return failed("the stream ended without data: [DONE]");
  auto milliseconds = [](Clock::duration span) { return std::chrono::duration<double, std::milli>(span).count(); };
  record.completed = true;
  record.finished_s = seconds(received);
  record.e2e_ms = milliseconds(received - sent);
  // A stream whose text all came in its last events (or none) had its first token no earlier.
  record.ttft_ms = tally.text_events > 0 ? milliseconds(tally.first_text - sent) : record.e2e_ms;
  record.output_tokens = tally.completion_tokens.value_or(tally.text_events);
  record.prompt_tokens = tally.prompt_tokens.value_or(0);
  return record;
}

}  // namespace slipway::cli
