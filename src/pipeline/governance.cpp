// Governance operations every front door shares (pipeline.h): annotations, API tokens and the
// labels performance monitoring joins. The text a person types is held to plain text here, so
// nothing a client sends reaches a terminal or a log with control characters in it.
#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

constexpr std::size_t kMaxLabelBytes = 1024;
constexpr std::size_t kMaxLabelsPerCall = 100'000;

}  // namespace

Status annotate(registry::Registry& registry, const std::string& model, std::optional<std::int64_t> version,
                const registry::Annotations& annotations, const Caller& caller) {
  if (annotations.owner && has_control_characters(*annotations.owner)) {
    return invalid_argument("the owner must not hold control characters (such as NUL, ESC or newlines)");
  }
  act_as(registry, caller);
  return registry.models().annotate(model, version, annotations);
}

Result<registry::NewToken> create_token(registry::Registry& registry, const std::string& name, const std::string& role,
                                        const Caller& caller) {
  if (!caller.may_administer) return permission_denied("creating API tokens is an admin act");
  if (name.empty() || name.size() > 128 || !is_valid_utf8(name) || has_control_characters(name)) {
    return invalid_argument("a token's name is 1 to 128 characters of text without control characters");
  }
  act_as(registry, caller);
  return registry.tokens().create(name, role);
}

Status revoke_token(registry::Registry& registry, const std::string& id, const Caller& caller) {
  if (!caller.may_administer) return permission_denied("revoking API tokens is an admin act");
  act_as(registry, caller);
  return registry.tokens().revoke(id);
}

Result<LabelsOutcome> record_labels(registry::Registry& registry, const std::string& model,
                                    const std::vector<std::pair<std::string, std::string>>& labels,
                                    const Caller& caller) {
  if (labels.size() > kMaxLabelsPerCall) {
    return invalid_argument("at most " + std::to_string(kMaxLabelsPerCall) + " labels a call, not " +
                            std::to_string(labels.size()));
  }
  for (const auto& [id, label] : labels) {
    for (const auto& [what, text] : {std::pair{"id", &id}, std::pair{"label", &label}}) {
      if (text->empty() || text->size() > kMaxLabelBytes || !is_valid_utf8(*text)) {
        return invalid_argument(std::string("a label's ") + what + " must be 1 to " + std::to_string(kMaxLabelBytes) +
                                " bytes of UTF-8 text (row with id '" + id.substr(0, 64) + "')");
      }
    }
  }
  act_as(registry, caller);
  LabelsOutcome outcome;
  SLIPWAY_ASSIGN_OR_RETURN(outcome.added, registry.models().record_labels(model, labels));
  outcome.recorded = labels.size();
  return outcome;
}

Result<LabelsOutcome> ingest_labels_file(registry::Registry& registry, const std::string& model,
                                         const std::string& path, const std::string& id_column,
                                         const std::string& label_column, const Caller& caller) {
  if (id_column == label_column) {
    return invalid_argument("the id and the label are two different columns, not both '" + id_column + "'");
  }
  // Ids and labels as written.
  SLIPWAY_ASSIGN_OR_RETURN(auto read, data::read_rows(path, {id_column, label_column}));
  const data::Column* ids = read.table.find(id_column);
  const data::Column* labels = read.table.find(label_column);
  if (ids == nullptr || labels == nullptr) {
    return invalid_argument(path + " has no column '" + (ids == nullptr ? id_column : label_column) + "'");
  }
  std::size_t skipped = read.bad_rows.size();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (std::size_t row = 0; row < read.table.row_count(); ++row) {
    if (ids->is_missing(row) || labels->is_missing(row)) {
      ++skipped;
      continue;
    }
    pairs.emplace_back(ids->text_at(row), labels->text_at(row));
  }
  // Stored in transactions of at most kMaxLabelsPerCall, each all or nothing.
  std::vector<std::pair<std::string, std::string>> batch;
  LabelsOutcome outcome;
  for (std::size_t start = 0; start < pairs.size(); start += kMaxLabelsPerCall) {
    batch.assign(pairs.begin() + static_cast<std::ptrdiff_t>(start),
                 pairs.begin() + static_cast<std::ptrdiff_t>(std::min(pairs.size(), start + kMaxLabelsPerCall)));
    SLIPWAY_ASSIGN_OR_RETURN(auto part, record_labels(registry, model, batch, caller));
    outcome.recorded += part.recorded;
    outcome.added += part.added;
  }
  outcome.skipped = skipped;
  return outcome;
}

}  // namespace slipway::pipeline
