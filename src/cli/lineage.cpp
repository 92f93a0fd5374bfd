// slipway lineage REF: what a version, run or data set came from, or (--downstream) what was
// built from it; as a tree, --json, or --dot for Graphviz.
#include <functional>
#include <ostream>
#include <set>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

std::string dot_quoted(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

struct LineageResult : CommandResult {
  pipeline::LineageGraph graph;
  bool downstream = false;
  bool dot = false;

  void write_json(JsonWriter& json) const override { pipeline::write_lineage_json(json, graph, downstream); }

  void write_text(std::ostream& out) const override {
    if (dot) return write_dot(out);
    // A tree from the sources (nodes nothing in the graph points to), children indented under
    // what they came from; a node met again is named, not expanded again.
    std::map<std::string, const pipeline::LineageNode*> by_id;
    for (const auto& node : graph.nodes) by_id[node.id] = &node;
    std::map<std::string, std::vector<const pipeline::LineageEdge*>> children;
    std::set<std::string> has_parent;
    for (const auto& edge : graph.edges) {
      children[edge.from].push_back(&edge);
      has_parent.insert(edge.to);
    }
    std::set<std::string> shown;
    std::function<void(const std::string&, const std::string&, int)> show = [&](const std::string& id,
                                                                                const std::string& via, int depth) {
      const pipeline::LineageNode& node = *by_id.at(id);
      out << std::string(static_cast<std::size_t>(depth) * 2, ' ') << (via.empty() ? "" : "-> (" + via + ") ")
          << node.label;
      if (id == graph.nodes.front().id) out << "   <== " << (downstream ? "from here" : "this");
      if (!shown.insert(id).second) {
        out << " (above)\n";
        return;
      }
      for (const auto& [key, value] : node.properties) {
        if (key == "code_version" || key == "seed" || key == "approved_by") out << "  " << key << "=" << value;
      }
      out << "\n";
      for (const auto* edge : children[id]) show(edge->to, edge->kind, depth + 1);
    };
    for (const auto& node : graph.nodes) {
      if (has_parent.count(node.id) == 0) show(node.id, "", 0);
    }
  }

  void write_dot(std::ostream& out) const {
    out << "digraph lineage {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
    for (const auto& node : graph.nodes) {
      std::string shape = node.type == "run"                                ? "box"
                          : node.type == "endpoint" || node.type == "alias" ? "cds"
                          : node.type == "experiment"                       ? "folder"
                          : node.type == "data"                             ? "cylinder"
                                                                            : "ellipse";
      out << "  " << dot_quoted(node.id) << " [label=" << dot_quoted(node.label) << ", shape=" << shape
          << (node.id == graph.nodes.front().id ? ", style=bold" : "") << "];\n";
    }
    for (const auto& edge : graph.edges) {
      out << "  " << dot_quoted(edge.from) << " -> " << dot_quoted(edge.to) << " [label=" << dot_quoted(edge.kind)
          << "];\n";
    }
    out << "}\n";
  }
};

Result<LineageResult> lineage(const GlobalOptions& global, const std::string& reference, bool downstream, bool dot) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  LineageResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.graph, pipeline::lineage(*store, reference, downstream));
  result.downstream = downstream;
  result.dot = dot;
  return result;
}

}  // namespace

int run_lineage(const GlobalOptions& global, const std::string& reference, bool downstream, bool dot) {
  return render(global, lineage(global, reference, downstream, dot));
}

}  // namespace slipway::cli
