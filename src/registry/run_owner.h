// Which process owns a run, and whether that process still exists. Private to the registry
// module. Linux: reads /proc.
#pragma once

#include <string>

#include "slipway/registry.h"

namespace slipway::registry {

// The calling process (read from /proc on each call: a forked child is another owner).
RunOwner current_process_owner();

enum class OwnerState {
  kAlive,    // the owning process is running
  kGone,     // it has exited, or the machine restarted since
  kUnknown,  // cannot tell from here: another host or pid namespace, or no owner recorded
};

struct OwnerCheck {
  OwnerState state = OwnerState::kUnknown;
  std::string reason;  // one phrase, e.g. "process 4242 on host 'ci-3' has exited"
};

// Decides from `owner` and this machine's /proc. A workspace is shared only by processes of one
// machine (SQLite's locking needs a local file system), so on the same host name a different
// boot id means the machine restarted.
OwnerCheck check_owner(const RunOwner& owner);

}  // namespace slipway::registry
