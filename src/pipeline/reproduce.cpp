// reproduce_run: a finished training run trained again from what it recorded.
#include <chrono>
#include <filesystem>
#include <random>

#include "slipway/pipeline.h"

namespace slipway::pipeline {

Result<std::string> data_fingerprint(const TrainSpec& spec) {
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(spec.data));
  if (spec.test_data.empty()) return data::fingerprint(table);
  SLIPWAY_ASSIGN_OR_RETURN(auto test, read_table(spec.test_data));
  return sha256_hex(data::fingerprint(table) + data::fingerprint(test));
}

Result<Reproduction> reproduce_run(registry::Registry& registry, const std::string& run_id,
                                   const TrainCallbacks& callbacks) {
  SLIPWAY_ASSIGN_OR_RETURN(registry::RunRecord run, registry.runs().get(run_id));
  if (run.status != "FINISHED" || run.bundle_sha256.empty()) {
    return failed_precondition("run " + run_id + " is " + run.status +
                               " without a bundle; only a finished run can be "
                               "reproduced");
  }
  if (auto members = run.tags.find("slipway.ensemble"); members != run.tags.end()) {
    return failed_precondition("run " + run_id + " is an ensemble AutoML averaged from runs " + members->second +
                               ": reproduce those runs");
  }
  if (run.code_version != slipway_code_version()) {
    return failed_precondition("run " + run_id + " was trained by code version " + run.code_version +
                               " and this slipway is " + std::string(slipway_code_version()) +
                               "; reproduce it with that build");
  }
  TrainSpec spec;
  if (Status loaded = load_spec_text(run.spec, "run " + run_id + "'s spec", spec); !loaded.ok()) {
    return failed_precondition("run " + run_id + " has no training spec to replay (an import?): " + loaded.message());
  }
  if (!spec.init_model.empty()) {
    return failed_precondition("run " + run_id + " started from " + spec.init_model +
                               "; reproducing a warm start is not supported yet");
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::string fingerprint, data_fingerprint(spec));
  if (fingerprint != run.data_fingerprint) {
    return failed_precondition("the data of run " + run_id + " (" + spec.data + ") has changed: its fingerprint is " +
                               fingerprint.substr(0, 12) + ", the run recorded " + run.data_fingerprint.substr(0, 12));
  }
  // A scratch workspace: the replay must not register, record runs or store artifacts here.
  std::filesystem::path scratch =
      std::filesystem::temp_directory_path() /
      ("slipway-reproduce-" + run_id.substr(0, 8) + "-" + std::to_string(std::random_device{}()));
  struct Cleanup {
    std::filesystem::path path;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{scratch};
  SLIPWAY_ASSIGN_OR_RETURN(auto workspace, registry::Registry::open(scratch.string(), true));
  spec.register_as.clear();
  spec.bundle_out.clear();
  spec.resume_run.clear();
  auto started = std::chrono::steady_clock::now();
  SLIPWAY_ASSIGN_OR_RETURN(TrainOutcome outcome, run_training(*workspace, spec, callbacks));
  Reproduction result;
  result.run_id = run_id;
  result.recorded_sha256 = run.bundle_sha256;
  result.reproduced_sha256 = outcome.bundle_sha256;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

void write_reproduction_json(JsonWriter& json, const Reproduction& reproduction) {
  json.begin_object().key("run_id").value(reproduction.run_id);
  json.key("recorded_sha256").value(reproduction.recorded_sha256);
  json.key("reproduced_sha256").value(reproduction.reproduced_sha256);
  json.key("identical").value(reproduction.identical()).key("seconds").value(reproduction.seconds).end_object();
}

}  // namespace slipway::pipeline
