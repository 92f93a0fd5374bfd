#include "registry/run_owner.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

namespace slipway::registry {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// Fields 3 and 22 of /proc/PID/stat: the state letter and the start time in clock ticks after
// boot. The command name (field 2) may hold spaces and parentheses, so fields count from the
// last ')'.
struct ProcessStat {
  char state = '?';
  std::int64_t start_ticks = 0;
};

std::optional<ProcessStat> read_stat(std::int64_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  ProcessStat stat;
  std::string field;
  fields >> stat.state;
  for (int index = 4; index < 22 && fields >> field; ++index) {
  }
  if (!(fields >> stat.start_ticks)) return std::nullopt;
  return stat;
}

}  // namespace

RunOwner current_process_owner() {
  RunOwner owner;
  owner.pid = ::getpid();
  if (auto stat = read_stat(owner.pid)) owner.start_ticks = stat->start_ticks;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) owner.host = host.data();
  owner.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  std::array<char, 64> link{};
  ssize_t length = ::readlink("/proc/self/ns/pid", link.data(), link.size() - 1);
  if (length > 0) owner.pid_namespace.assign(link.data(), static_cast<std::size_t>(length));
  return owner;
}

OwnerCheck check_owner(const RunOwner& owner) {
  if (owner.pid <= 0)
    return {OwnerState::kUnknown, "its process was not recorded (it started before slipway kept owners)"};
  const RunOwner& here = current_process_owner();
  std::string process = "process " + std::to_string(owner.pid) + " on host '" + owner.host + "'";
  if (owner.host != here.host)
    return {OwnerState::kUnknown, process + " cannot be checked from host '" + here.host + "'"};
  if (!owner.boot_id.empty() && !here.boot_id.empty() && owner.boot_id != here.boot_id) {
    return {OwnerState::kGone, process + " is gone: the machine restarted since"};
  }
  if (owner.pid_namespace != here.pid_namespace) {
    return {OwnerState::kUnknown,
            process + " is in another pid namespace (container), which cannot be checked from here"};
  }
  errno = 0;
  if (::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) {
    return {OwnerState::kGone, process + " has exited"};
  }
  // It exists (or we may not signal it: EPERM). /proc tells an exited-but-unreaped process and a
  // reused pid apart; without /proc it counts as running.
  if (auto stat = read_stat(owner.pid)) {
    if (stat->state == 'Z' || stat->state == 'X') return {OwnerState::kGone, process + " has exited"};
    if (owner.start_ticks != 0 && stat->start_ticks != owner.start_ticks) {
      return {OwnerState::kGone, process + " has exited (its pid now belongs to another process)"};
    }
  }
  return {OwnerState::kAlive, process + " is running"};
}

}  // namespace slipway::registry
