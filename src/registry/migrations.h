// Applying and checking the numbered schema migrations of a metadata backend. Private to the
// registry module.
//
// The applied versions live in `schema_migrations(version, name, applied_ms)`. A database without
// that table is at version 0: either new, or made by a slipway from before migrations were
// recorded (it set `PRAGMA user_version = 1` on every open and created its tables with
// `CREATE TABLE IF NOT EXISTS`). Migration 1 is that same schema, still written with `IF NOT
// EXISTS`, so it completes both: an empty database gets every table, an old one the tables its
// release predates (checkpoints, serving_configs, api_tokens), and its rows stay as they are.
#pragma once

#include <cstdint>

#include "registry/metadata_backend.h"

namespace slipway::registry {

// The highest version applied (0 when none). FailedPrecondition when the database records a
// version this build does not know (a newer slipway made it), or a known version under another
// name; the message names `where` (the workspace).
Result<std::int64_t> applied_schema_version(MetadataBackend& backend, const std::string& where);

// Applies each pending migration in its own write transaction (re-checking the version inside
// it, so concurrent openers apply each once) and returns the version reached. A failed migration
// leaves the database at the previous version.
Result<std::int64_t> apply_migrations(MetadataBackend& backend, const std::string& where);

}  // namespace slipway::registry
