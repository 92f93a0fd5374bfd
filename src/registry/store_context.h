// What the stores of one Registry share. Private to the registry module.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "registry/metadata_backend.h"
#include "slipway/registry.h"

namespace slipway::registry {

struct StoreContext {
  std::unique_ptr<MetadataBackend> backend;
  ArtifactStore artifacts;
  std::string actor;  // who the audit log names: $USER, else the account name, else "uid:N"
};

// NotFound, naming `model`, when no model has that name.
Status check_model_exists(SqlTransaction& sql, const std::string& model);

// Appends an audit log entry inside the caller's write transaction, so the entry commits (or
// not) with the mutation it describes.
Status append_audit(SqlTransaction& sql, const StoreContext& context, std::string_view action, std::string_view detail);

}  // namespace slipway::registry
