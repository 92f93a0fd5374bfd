#include "pipeline/step_cache.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include <fmt/format.h>

namespace slipway::pipeline {
namespace {

// Numbers travel as text with every digit (and nan, inf), so a value read back is the same double.
std::string number_text(double value) { return fmt::format("{:.17g}", value); }

double number_of(const YAML::Node& node) { return std::strtod(node.as<std::string>().c_str(), nullptr); }

void emit_metrics(YAML::Emitter& out, const eval::Metrics& metrics) {
  out << YAML::BeginSeq;
  for (const auto& [name, value] : metrics.values)
    out << YAML::Flow << YAML::BeginSeq << name << number_text(value) << YAML::EndSeq;
  out << YAML::EndSeq;
}

eval::Metrics metrics_of(const YAML::Node& node) {
  eval::Metrics metrics;
  for (const auto& pair : node) metrics.values.emplace_back(pair[0].as<std::string>(), number_of(pair[1]));
  return metrics;
}

}  // namespace

std::string summary_record(const train::TrainSummary& summary) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "features" << YAML::Value << YAML::Flow << summary.features;
  out << YAML::Key << "rows_used" << YAML::Value << summary.rows_used;
  out << YAML::Key << "rows_dropped_missing_target" << YAML::Value << summary.rows_dropped_missing_target;
  out << YAML::Key << "iterations" << YAML::Value << summary.iterations;
  out << YAML::Key << "converged" << YAML::Value << summary.converged;
  out << YAML::Key << "round_metric" << YAML::Value << summary.round_metric;
  out << YAML::Key << "best_round" << YAML::Value << summary.best_round;
  out << YAML::Key << "stopped_early" << YAML::Value << summary.stopped_early;
  out << YAML::Key << "validation_rows" << YAML::Value << summary.validation_rows;
  out << YAML::EndMap;
  return out.c_str();
}

Status read_summary_record(const std::string& text, train::TrainSummary& summary) {
  try {
    YAML::Node node = YAML::Load(text);
    summary.features = node["features"].as<std::vector<std::string>>();
    summary.rows_used = node["rows_used"].as<std::size_t>();
    summary.rows_dropped_missing_target = node["rows_dropped_missing_target"].as<std::size_t>();
    summary.iterations = node["iterations"].as<int>();
    summary.converged = node["converged"].as<bool>();
    summary.round_metric = node["round_metric"].as<std::string>();
    summary.best_round = node["best_round"].as<int>();
    summary.stopped_early = node["stopped_early"].as<bool>();
    summary.validation_rows = node["validation_rows"].as<std::size_t>();
  } catch (const YAML::Exception& error) {
    return data_loss(std::string("a cached training summary does not read: ") + error.what());
  }
  return {};
}

std::string evaluation_record(const eval::Evaluation& evaluation) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "rows" << YAML::Value << evaluation.rows;
  out << YAML::Key << "rows_missing_target" << YAML::Value << evaluation.rows_missing_target;
  out << YAML::Key << "overall" << YAML::Value;
  emit_metrics(out, evaluation.overall);
  out << YAML::Key << "slice_column" << YAML::Value << evaluation.slice_column;
  out << YAML::Key << "slices" << YAML::Value << YAML::BeginSeq;
  for (const auto& slice : evaluation.slices) {
    out << YAML::BeginMap << YAML::Key << "value" << YAML::Value << slice.value;
    out << YAML::Key << "rows" << YAML::Value << slice.rows << YAML::Key << "metrics" << YAML::Value;
    emit_metrics(out, slice.metrics);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

Result<eval::Evaluation> read_evaluation_record(const std::string& text) {
  eval::Evaluation evaluation;
  try {
    YAML::Node node = YAML::Load(text);
    evaluation.rows = node["rows"].as<std::size_t>();
    evaluation.rows_missing_target = node["rows_missing_target"].as<std::size_t>();
    evaluation.overall = metrics_of(node["overall"]);
    evaluation.slice_column = node["slice_column"].as<std::string>();
    for (const auto& slice : node["slices"]) {
      evaluation.slices.push_back(
          {slice["value"].as<std::string>(), slice["rows"].as<std::size_t>(), metrics_of(slice["metrics"])});
    }
  } catch (const YAML::Exception& error) {
    return data_loss(std::string("a cached evaluation does not read: ") + error.what());
  }
  return evaluation;
}

}  // namespace slipway::pipeline
