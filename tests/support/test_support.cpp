#include "support/test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // Boost 1.74 uses std::exchange without including it

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

namespace slipway::testing {
namespace {

std::vector<char*> c_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  return args;
}

std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  while (true) {
    ssize_t count = ::read(fd, buffer, sizeof buffer);
    if (count <= 0) break;
    out.append(buffer, static_cast<std::size_t>(count));
  }
  return out;
}

}  // namespace

TempDir::TempDir() {
  std::random_device random;
  path_ = (std::filesystem::temp_directory_path() /
           ("slipway-test-" + std::to_string(random()) + std::to_string(::getpid())))
              .string();
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string data_path(const std::string& file) { return std::string(SLIPWAY_TEST_DATA_DIR) + "/" + file; }
std::string data_dir() { return SLIPWAY_TEST_DATA_DIR; }
std::string source_dir() { return SLIPWAY_SOURCE_DIR; }
std::string slipway_binary() { return SLIPWAY_BINARY; }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& environment) {
  static int counter = 0;
  std::string out_path = std::filesystem::temp_directory_path() /
                         ("slipway-cmd-out-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::string err_path = out_path + ".err";
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (const auto& entry : environment) ::putenv(const_cast<char*>(entry.c_str()));
    auto args = c_args(argv);
    ::execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream out(out_path);
  result.out.assign(std::istreambuf_iterator<char>(out), {});
  std::ifstream err(err_path);
  result.err.assign(std::istreambuf_iterator<char>(err), {});
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    auto args = c_args(argv);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(pipe_fds[1]);
  stdout_fd_ = pipe_fds[0];
}

ChildProcess::~ChildProcess() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

std::string ChildProcess::read_line(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    auto newline = pending_.find('\n');
    if (newline != std::string::npos) {
      std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      return line;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return "";
    pollfd poll_fd{stdout_fd_, POLLIN, 0};
    if (::poll(&poll_fd, 1, static_cast<int>(left)) <= 0) return "";
    char buffer[4096];
    ssize_t count = ::read(stdout_fd_, buffer, sizeof buffer);
    if (count <= 0) return "";
    pending_.append(buffer, static_cast<std::size_t>(count));
  }
}

void ChildProcess::signal(int signal_number) { ::kill(pid_, signal_number); }

int ChildProcess::wait() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exited_ = true;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

long resident_kib(pid_t pid) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status") : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  http::request<http::string_body> request(http::string_to_verb(method), target, 11);
  request.set(http::field::host, "127.0.0.1");
  request.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.body() = body;
  request.prepare_payload();
  // A server may answer before it has read the whole body (413 for one over its limit) and close:
  // the write then fails, and the answer is still there to read.
  beast::error_code write_error;
  http::write(stream, request, write_error);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code read_error;
  http::read(stream, buffer, response, read_error);
  if (read_error) throw beast::system_error(write_error ? write_error : read_error);
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  HttpResult result{
      static_cast<int>(response.result_int()), response.body(), std::string(response[http::field::content_type]), {}};
  for (const auto& field : response) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    result.headers[name] = std::string(field.value());
  }
  return result;
}

StartedServer read_started_server(ChildProcess& server) {
  StartedServer started;
  started.first_line = server.read_line(20000);
  const auto at = started.first_line.find("\"port\":");
  if (at != std::string::npos) started.port = std::atoi(started.first_line.c_str() + at + 7);
  return started;
}

}  // namespace slipway::testing
