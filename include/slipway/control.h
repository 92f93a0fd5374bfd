// slipway/control.h — the front doors composed over the operations. Each door parses a request,
// authorizes it, calls the operation in `pipeline` and encodes its result; none changes the store
// itself. The management API under /api, which `slipway serve` mounts beside KServe v2.
//
// Threads: the handler may be called from any number of threads at once; each call opens the
// workspace for itself.
#pragma once

#include <string>

#include "slipway/serve.h"

namespace slipway::control {

struct ManagementOptions {
  std::string home;             // the workspace
  std::string request_log_dir;  // where the server logs requests (monitoring reads it); empty: <home>/request_log
};

// The management API over the workspace (JSON in and out; errors {"error": "..."}), every route
// declared once in src/control/ and listed by GET /openapi.json: endpoints and rollouts, models
// and versions (register an upload, alias, retire, annotations, labels, serving configs,
// optimizations, retrain policies, approvals, evaluations, comparisons, explanations, exports),
// runs and tracking, training jobs, retrainings and reproductions, lineage, batch jobs,
// monitoring and alerts, endpoint descriptions, the training parameters, the audit log, tokens,
// and the workspace's upkeep (verify, gc). Each route states the
// least role that may call it (predict reads nothing here; read lists; deploy changes; admin approves, lifts approval
// requirements and manages tokens): the handler refuses a lesser one with 403. A change opens
// the workspace for writing for the call (a workspace on a read-only disk says so in the answer)
// and is audited under "token:NAME"; a write sent again with the same Idempotency-Key gets the
// first answer. Batch and training jobs run on the handler's own threads: destroying the handler
// cancels them and waits (a training stops after the round in progress).
serve::ManagementHandler management_api(ManagementOptions options);

}  // namespace slipway::control
