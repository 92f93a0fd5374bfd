// slipway/model/ensembles.h — models of one family averaged into one model of that family: what
// AutoML registers when its best trials score better together than the best alone.
#pragma once

#include <memory>
#include <span>

#include "slipway/core.h"
#include "slipway/model.h"

namespace slipway::model {

// A bundle whose margins are the mean of `members`' margins (for a classifier, the members'
// log-odds or logits averaged, then the link applied), as one model of the members' family:
//  - tree ensembles merge into one ensemble holding every member's trees, each leaf divided by
//    the member count, the base margins averaged (so it serves, exports and explains like any);
//  - linear models average their weights and biases.
// The members must answer the same question from the same inputs: at least two, one task, target
// and class labels, equal preprocessing, one family (tree_ensemble, or linear with float
// weights), one input width and output count. The manifest is the first member's, its metrics
// and optimization record cleared and its params replaced by "ensemble.size" and each member's
// params as "member.I.KEY" (I from 1); the decision threshold is the members' when they share one
// given as a number, else 0.5 (a rule's threshold was chosen for one member's probabilities). The caller records the
// ensemble's own metrics and profile (with_metrics, with_profile). InvalidArgument naming the member that differs and
// how.
Result<std::shared_ptr<const Bundle>> averaged_bundle(std::span<const std::shared_ptr<const Bundle>> members);

}  // namespace slipway::model
