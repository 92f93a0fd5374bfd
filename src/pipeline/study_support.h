// What the study operations share (private to pipeline): tuning.cpp runs studies, automl.cpp
// runs studies across model families.
#pragma once

#include "slipway/model.h"
#include "slipway/pipeline/tuning.h"
#include "slipway/registry.h"

namespace slipway::pipeline {

// The longest budget a study or AutoML takes (a longer one would overflow the deadline's clock).
inline constexpr double kLongestBudgetSeconds = 30.0 * 24 * 3600;

// A trial that a cancel, a budget or its worker's death ended: it does not count toward the
// study's trials and runs again once.
bool interrupted(const registry::StudyTrial& trial);

// The task training will infer from the target as it does: logistic and two values are binary,
// more than two texts multiclass, other numbers regression, unless the family's objective
// parameter says. Reads the data when only the target can tell.
Result<model::Task> inferred_task(const TrainSpec& spec);

}  // namespace slipway::pipeline
