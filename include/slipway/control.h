// slipway/control.h — the front doors composed over the operations. Each door parses a request,
// authorizes it, calls the operation in `pipeline` and encodes its result; none changes the store
// itself. Today: the management API under /api, which `slipway serve` mounts beside KServe v2.
//
// Threads: the handler may be called from any number of threads at once; each call opens the
// workspace for itself.
#pragma once

#include <string>

#include "slipway/serve.h"

namespace slipway::control {

// The management API over the workspace at `home` (JSON in and out; errors {"error": "..."}):
//   GET  /api/endpoints                          every endpoint
//   GET  /api/endpoints/NAME                     one endpoint
//   GET  /api/endpoints/NAME/rollout             its last rollout
//   POST /api/endpoints/NAME/deploy              {"model": "churn@4", "canary": 10} or
//        {"model", "steps": [10, 50, 100], "interval_ms", "criteria"}, and optionally
//        "gate": {"data": FILE, "metric": "auc", "thresholds": "max_drop=0.01", "slice": COLUMN}
//   POST /api/endpoints/NAME/promote | rollback
//   POST /api/endpoints/NAME/settings            {"fallback", "deadline_ms", "owner",
//        "require_approval" (admin to change), "shadow": {"model", "percent"} or null}
//   POST | DELETE /api/models/NAME/versions/V/approval   {"note": "..."} (admin)
//   GET  /api/audit?model=NAME&since_ms=T&limit=N
// The service has required the deploy role for every /api route; `ManagementCall::role` decides
// the admin acts (pipeline::Caller). A change opens the workspace for writing for the call (a
// workspace on a read-only disk says so in the answer) and is audited under "token:NAME".
serve::ManagementHandler management_api(std::string home);

}  // namespace slipway::control
