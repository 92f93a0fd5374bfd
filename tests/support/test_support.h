// Shared helpers for tests: temporary folders, data paths, child processes and an HTTP client.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace slipway::testing {

// A fresh folder under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string data_path(const std::string& file);  // a file under the repository's data/
std::string data_dir();
std::string source_dir();  // the repository's root
std::string slipway_binary();
void write_text(const std::string& path, const std::string& text);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs argv (no shell) to completion; `environment` adds NAME=VALUE entries for the child only.
CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& environment = {});

// A child process whose stdout can be read line by line; killed (SIGKILL) on destruction if still running.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // The next stdout line, or "" at EOF / after timeout_ms.
  std::string read_line(int timeout_ms);
  void signal(int signal_number);
  // Waits for exit; returns the exit code, or 128+signal.
  int wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string pending_;
  bool exited_ = false;
};

// A server started with --json and --port 0 prints {"port":N,...} first: N, and the line (for a
// failure's message); port 0 when no such line comes within 20 s.
struct StartedServer {
  int port = 0;
  std::string first_line;
};
StartedServer read_started_server(ChildProcess& server);

// The resident memory of process `pid` (0: this process) in KiB, from /proc; 0 if unreadable.
long resident_kib(pid_t pid = 0);

struct HttpResult {
  int status = 0;
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;  // by lower-case name
  std::string header(const std::string& lower_case_name) const {
    auto found = headers.find(lower_case_name);
    return found == headers.end() ? "" : found->second;
  }
};
// One HTTP/1.1 request to 127.0.0.1:port, with any extra headers.
HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                        const std::vector<std::pair<std::string, std::string>>& headers = {});

}  // namespace slipway::testing
