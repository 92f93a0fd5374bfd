// The step cache's records: what a cached train or eval returned, as YAML text the registry
// stores (RunStore::record_cached_step), and read back. Private to pipeline.
#pragma once

#include <string>

#include "slipway/eval.h"
#include "slipway/train.h"

namespace slipway::pipeline {

// The summary of a fit, without its bundle and per-round history (the run keeps those).
std::string summary_record(const train::TrainSummary& summary);
Status read_summary_record(const std::string& text, train::TrainSummary& summary);

std::string evaluation_record(const eval::Evaluation& evaluation);
Result<eval::Evaluation> read_evaluation_record(const std::string& text);

}  // namespace slipway::pipeline
