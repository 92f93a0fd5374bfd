// Lineage: the workspace's runs, bundles, versions, aliases, endpoints and gate results as one
// graph, and the part of it upstream or downstream of a reference.
#include <deque>
#include <filesystem>
#include <limits>
#include <set>

#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

struct GraphBuilder {
  std::map<std::string, LineageNode> nodes;
  std::vector<LineageEdge> edges;

  LineageNode& node(const std::string& id, const std::string& type, const std::string& label) {
    auto [at, inserted] = nodes.try_emplace(id);
    if (inserted) at->second = LineageNode{id, type, label, {}};
    return at->second;
  }
  void edge(const std::string& from, const std::string& to, const std::string& kind) {
    edges.push_back({from, to, kind});
  }
};

std::string short_hash(const std::string& hash) { return hash.substr(0, 12); }

std::string version_id(const std::string& model, std::int64_t version) {
  return "version:" + model + "@" + std::to_string(version);
}

Result<GraphBuilder> whole_graph(registry::Registry& registry) {
  GraphBuilder graph;
  SLIPWAY_ASSIGN_OR_RETURN(auto runs, registry.runs().list(std::numeric_limits<std::size_t>::max()));
  for (const auto& run : runs) {
    std::string id = "run:" + run.run_id;
    LineageNode& node =
        graph.node(id, "run", std::string(run.imported() ? "import" : "train") + " run " + run.run_id.substr(0, 8));
    node.properties = {{"status", run.status},
                       {"code_version", run.code_version},
                       {"experiment", run.experiment},
                       {"started_ms", std::to_string(run.start_ms)}};
    for (const char* key : {"seed", "model", "init_model", "cached_from"}) {
      if (auto found = run.params.find(key); found != run.params.end()) node.properties[key] = found->second;
    }
    graph.node("experiment:" + run.experiment, "experiment", "experiment " + run.experiment);
    graph.edge(id, "experiment:" + run.experiment, "in");
    if (!run.data_fingerprint.empty()) {
      graph.node("data:" + run.data_fingerprint, "data", "data " + short_hash(run.data_fingerprint))
          .properties["fingerprint"] = run.data_fingerprint;
      graph.edge("data:" + run.data_fingerprint, id, "input");
    }
    if (!run.bundle_sha256.empty()) {
      graph.node("bundle:" + run.bundle_sha256, "bundle", "bundle " + short_hash(run.bundle_sha256))
          .properties["sha256"] = run.bundle_sha256;
      graph.edge(id, "bundle:" + run.bundle_sha256, "output");
    }
    if (auto init = run.params.find("init_model"); init != run.params.end()) {
      // "NAME@VERSION sha256:...": the version a warm start continued from.
      std::string reference = init->second.substr(0, init->second.find(' '));
      auto parsed = registry::parse_model_reference(reference);
      if (parsed.ok() && parsed->second.version) {
        graph.edge(version_id(parsed->first, *parsed->second.version), id, "input (warm start)");
      }
    }
  }
  // Studies: each trial's run is the output of the trial, the trial of its study.
  SLIPWAY_ASSIGN_OR_RETURN(auto studies, registry.studies().list());
  for (const auto& summary : studies) {
    const std::string& name = summary.study.name;
    std::string study_id = "study:" + name;
    graph.node(study_id, "study", "study " + name).properties = {
        {"created_ms", std::to_string(summary.study.created_ms)}};
    SLIPWAY_ASSIGN_OR_RETURN(auto trials, registry.studies().trials(name));
    for (const auto& trial : trials) {
      if (trial.run_id.empty()) continue;
      std::string trial_id = "trial:" + name + "#" + std::to_string(trial.number);
      LineageNode& node =
          graph.node(trial_id, "trial", "trial " + std::to_string(trial.number) + " (" + trial.state + ")");
      node.properties = trial.params;
      node.properties["state"] = trial.state;
      graph.edge(study_id, trial_id, "output");
      graph.edge(trial_id, "run:" + trial.run_id, "output");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto jobs, registry.runs().batch_jobs());
  for (const auto& job : jobs) {
    std::string id = "batch:" + job.key;
    graph.node(id, "batch", "batch job " + short_hash(job.key)).properties = {
        {"state", job.state},
        {"model", job.model},
        {"out", job.out},
        {"rows", std::to_string(job.rows)},
        {"scored", std::to_string(job.scored)},
        {"bad", std::to_string(job.bad)},
        {"started_ms", std::to_string(job.started_ms)}};
    graph.node("bundle:" + job.bundle_sha256, "bundle", "bundle " + short_hash(job.bundle_sha256))
        .properties["sha256"] = job.bundle_sha256;
    graph.edge("bundle:" + job.bundle_sha256, id, "input");
    // Scored with a registered version (not a bundle file): downstream of that version too.
    if (auto parsed = registry::parse_model_reference(job.model); parsed.ok() && parsed->second.version) {
      graph.edge(version_id(parsed->first, *parsed->second.version), id, "input");
    }
    LineageNode& input = graph.node("data:" + job.input_sha256, "data", "data " + short_hash(job.input_sha256));
    input.properties["sha256"] = job.input_sha256;
    input.properties["path"] = job.input;
    graph.edge("data:" + job.input_sha256, id, "input");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto retrainings, registry.retraining().list("", std::numeric_limits<std::size_t>::max()));
  for (const auto& retraining : retrainings) {
    std::string id = "retrain:" + std::to_string(retraining.id);
    LineageNode& node =
        graph.node(id, "retrain", "retraining #" + std::to_string(retraining.id) + " (" + retraining.state + ")");
    node.properties = {{"reason", retraining.reason},
                       {"state", retraining.state},
                       {"started_ms", std::to_string(retraining.started_ms)}};
    if (!retraining.message.empty()) node.properties["message"] = retraining.message;
    if (!retraining.deployed.empty()) node.properties["deployed"] = retraining.deployed;
    if (retraining.baseline_version > 0) {
      graph.edge(version_id(retraining.model, retraining.baseline_version), id, "input (baseline)");
    }
    if (!retraining.run_id.empty()) graph.edge(id, "run:" + retraining.run_id, "output");
    if (retraining.state == "rejected") {
      // A rejected candidate's gate is only here: a registered one's is recorded with its version.
      std::string gate_id = "gate:" + retraining.gate_report_sha256;
      graph.node(gate_id, "gate", "gate FAILED (retraining #" + std::to_string(retraining.id) + ")")
          .properties["report_sha256"] = retraining.gate_report_sha256;
      graph.edge(id, gate_id, "output");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto models, registry.models().list());
  for (const auto& model : models) {
    SLIPWAY_ASSIGN_OR_RETURN(auto versions, registry.models().list_versions(model.name));
    for (const auto& version : versions) {
      std::string id = version_id(model.name, version.version);
      LineageNode& node = graph.node(id, "version", model.name + "@" + std::to_string(version.version));
      node.properties = {{"registered_ms", std::to_string(version.created_ms)}, {"creator", version.creator}};
      if (version.approval) node.properties["approved_by"] = version.approval->approver;
      graph.node("bundle:" + version.bundle_sha256, "bundle", "bundle " + short_hash(version.bundle_sha256))
          .properties["sha256"] = version.bundle_sha256;
      graph.edge("bundle:" + version.bundle_sha256, id, "registered");
      for (const auto& alias : version.aliases) {
        std::string alias_id = "alias:" + model.name + "@" + alias;
        graph.node(alias_id, "alias", model.name + "@" + alias);
        graph.edge(id, alias_id, "points_to");
      }
      // A version `slipway optimize` made names its baseline in its manifest.
      auto loaded = resolve_reference(&registry, model.name + "@" + std::to_string(version.version));
      if (loaded.ok()) {
        const auto& optimization = loaded->bundle->manifest().optimization;
        auto baseline = optimization.find("baseline");
        auto technique = optimization.find("technique");
        if (baseline != optimization.end()) {
          auto parsed = registry::parse_model_reference(baseline->second);
          if (parsed.ok() && parsed->second.version) {
            graph.edge(version_id(parsed->first, *parsed->second.version), id,
                       "optimized (" + (technique == optimization.end() ? std::string("?") : technique->second) + ")");
          }
        }
      }
      SLIPWAY_ASSIGN_OR_RETURN(auto gates, registry.models().gate_results(model.name, version.version));
      for (const auto& gate : gates) {
        std::string gate_id = "gate:" + gate.report_sha256;
        LineageNode& gate_node = graph.node(gate_id, "gate",
                                            std::string("gate ") + (gate.passed ? "passed" : "FAILED") + " (" +
                                                gate.metric + " " + gate.criteria + ")");
        gate_node.properties = {{"report_sha256", gate.report_sha256}, {"data_fingerprint", gate.data_fingerprint}};
        graph.edge(id, gate_id, "candidate");
        graph.edge(version_id(gate.baseline_model, gate.baseline_version), gate_id, "baseline");
      }
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto endpoints, registry.endpoints().list());
  for (const auto& endpoint : endpoints) {
    std::string id = "endpoint:" + endpoint.name;
    graph.node(id, "endpoint", "endpoint " + endpoint.name);
    for (const auto& route : endpoint.routes) {
      graph.edge(version_id(route.model, route.version), id, "routes " + format_config_number(route.percent) + "%");
    }
    if (!endpoint.shadow.model.empty()) {
      graph.edge(version_id(endpoint.shadow.model, endpoint.shadow.version), id, "shadow");
    }
  }
  return graph;
}

// Edges along which something is made from something else (not where it is exposed).
bool made_from(const LineageEdge& edge) {
  return edge.kind == "input" || edge.kind == "output" || edge.kind == "registered" ||
         edge.kind.starts_with("optimized") || edge.kind.starts_with("input (");
}

}  // namespace

Result<LineageGraph> lineage(registry::Registry& registry, const std::string& reference, bool downstream) {
  SLIPWAY_ASSIGN_OR_RETURN(GraphBuilder graph, whole_graph(registry));
  std::string start;
  if (graph.nodes.count("run:" + reference) != 0) {
    start = "run:" + reference;
  } else if (std::error_code error; std::filesystem::is_regular_file(reference, error)) {
    SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(reference));
    start = "data:" + data::fingerprint(table);
    if (graph.nodes.count(start) == 0) {
      return not_found("no run in this workspace used the data in " + reference + " (fingerprint " +
                       data::fingerprint(table).substr(0, 12) + ")");
    }
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
    SLIPWAY_ASSIGN_OR_RETURN(auto version, registry.models().resolve(parsed.first, parsed.second));
    start = version_id(version.model, version.version);
  }
  std::set<std::string> kept = {start};
  std::deque<std::string> frontier = {start};
  while (!frontier.empty()) {
    std::string at = frontier.front();
    frontier.pop_front();
    for (const auto& edge : graph.edges) {
      // Downstream follows every edge forward; upstream follows "made from" edges back, from the
      // start also forward to what exposes it (aliases, endpoints, gates), and from a run to its
      // experiment.
      bool forward = edge.from == at && (downstream || (at == start && !made_from(edge)) || edge.kind == "in");
      bool back = !downstream && edge.to == at && made_from(edge);
      std::string next = forward ? edge.to : back ? edge.from : std::string();
      if (!next.empty() && kept.insert(next).second) {
        // Exposure is one hop: what else routes to an endpoint is not the start's lineage.
        bool exposure = !downstream && edge.from == at && edge.kind != "in";
        if (!exposure) frontier.push_back(next);
      }
    }
  }
  LineageGraph result;
  result.nodes.push_back(graph.nodes.at(start));
  for (const auto& id : kept) {
    if (id != start && graph.nodes.count(id) != 0) result.nodes.push_back(graph.nodes.at(id));
  }
  std::set<std::string> present;
  for (const auto& node : result.nodes) present.insert(node.id);
  for (const auto& edge : graph.edges) {
    if (present.count(edge.from) != 0 && present.count(edge.to) != 0) result.edges.push_back(edge);
  }
  return result;
}

void write_lineage_json(JsonWriter& json, const LineageGraph& graph, bool downstream) {
  json.begin_object().key("start").value(graph.nodes.empty() ? std::string() : graph.nodes.front().id);
  json.key("direction").value(downstream ? "downstream" : "upstream").key("nodes").begin_array();
  for (const auto& node : graph.nodes) {
    json.begin_object().key("id").value(node.id).key("type").value(node.type).key("label").value(node.label);
    json.key("properties").begin_object();
    for (const auto& [key, value] : node.properties) json.key(key).value(value);
    json.end_object().end_object();
  }
  json.end_array().key("edges").begin_array();
  for (const auto& edge : graph.edges) {
    json.begin_object().key("from").value(edge.from).key("to").value(edge.to).key("kind").value(edge.kind);
    json.end_object();
  }
  json.end_array().end_object();
}

}  // namespace slipway::pipeline
