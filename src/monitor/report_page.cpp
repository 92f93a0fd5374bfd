// The monitoring report as one HTML page with inline SVG: readable offline, nothing fetched.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "slipway/monitor.h"

namespace slipway::monitor {
namespace {

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The label of each slot of a profile input (its bins, or levels then "other"), then "missing".
std::vector<std::string> slot_labels(const model::FeatureProfile& feature) {
  std::vector<std::string> labels;
  if (feature.type == data::ColumnType::kNumeric) {
    if (!feature.edges.empty()) {
      labels.push_back(fmt::format("< {:.4g}", feature.edges.front()));
      for (std::size_t index = 1; index < feature.edges.size(); ++index) {
        labels.push_back(fmt::format("{:.4g} to {:.4g}", feature.edges[index - 1], feature.edges[index]));
      }
      labels.push_back(fmt::format("> {:.4g}", feature.edges.back()));
    }
  } else {
    for (const auto& level : feature.levels) labels.push_back(level.size() > 24 ? level.substr(0, 24) + "…" : level);
    labels.push_back("(other)");
  }
  labels.push_back("(missing)");
  return labels;
}

// Reference (grey) and current (blue) shares per slot, side by side.
std::string bars(const InputDrift& drift, const std::vector<std::string>& labels) {
  constexpr double kWidth = 560, kHeight = 150, kBottom = 130;
  std::size_t slots = std::min(drift.reference_share.size(), drift.current_share.size());
  if (slots == 0) return "";
  double largest = 1e-9;
  for (std::size_t index = 0; index < slots; ++index) {
    largest = std::max({largest, drift.reference_share[index], drift.current_share[index]});
  }
  double step = kWidth / static_cast<double>(slots);
  std::string svg = fmt::format(R"(<svg width="{}" height="{}" role="img" aria-label="{} distribution">)", kWidth,
                                kHeight, escape(drift.name));
  for (std::size_t index = 0; index < slots; ++index) {
    double x = step * static_cast<double>(index);
    double reference = drift.reference_share[index] / largest * (kBottom - 10);
    double current = drift.current_share[index] / largest * (kBottom - 10);
    std::string label = index < labels.size() ? escape(labels[index]) : "";
    svg += fmt::format(
        R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#aaa"><title>{}: training {:.3f}</title></rect>)",
        x + 1, kBottom - reference, step / 2 - 1, reference, label, drift.reference_share[index]);
    svg += fmt::format(
        R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#2b6cb0"><title>{}: current {:.3f}</title></rect>)",
        x + step / 2, kBottom - current, step / 2 - 1, current, label, drift.current_share[index]);
  }
  svg += fmt::format(R"(<line x1="0" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/>)", kBottom, kWidth);
  svg += fmt::format(R"(<text x="0" y="{}" font-size="10">{}</text>)", kHeight - 4,
                     escape(labels.empty() ? "" : labels.front()));
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>)", kWidth, kHeight - 4,
                     escape(labels.size() >= 2 ? labels[labels.size() - 2] : ""));
  return svg + "</svg>";
}

// One input's distance over time, with the threshold as a dashed line.
std::string line(const std::vector<DriftPoint>& history, std::size_t input, double threshold) {
  constexpr double kWidth = 560, kHeight = 80;
  if (history.size() < 2) return "";
  auto value = [&](const DriftPoint& point) {
    return input < point.inputs.size() ? point.inputs[input] : point.prediction;
  };
  double largest = threshold;
  for (const auto& point : history) largest = std::max(largest, value(point));
  double step = kWidth / static_cast<double>(history.size() - 1);
  std::string points;
  for (std::size_t index = 0; index < history.size(); ++index) {
    points += fmt::format("{:.1f},{:.1f} ", step * static_cast<double>(index),
                          kHeight - 4 - value(history[index]) / largest * (kHeight - 8));
  }
  double threshold_y = kHeight - 4 - threshold / largest * (kHeight - 8);
  return fmt::format(
      R"(<svg width="{0}" height="{1}" role="img" aria-label="drift over time"><polyline points="{2}" fill="none" stroke="#2b6cb0"/><line x1="0" y1="{3:.1f}" x2="{0}" y2="{3:.1f}" stroke="#c53030" stroke-dasharray="4"/></svg>)",
      kWidth, kHeight, points, threshold_y);
}

}  // namespace

std::string html_report(const model::DataProfile& profile, const DriftReport& report, const std::string& title,
                        const std::string& current, const std::string& reference,
                        const std::vector<DriftPoint>& history, const DriftThresholds& thresholds) {
  std::string page = "<!doctype html><html><head><meta charset=\"utf-8\"><title>Drift: " + escape(title) +
                     "</title><style>body{font-family:sans-serif;margin:2em;max-width:64em}table{border-collapse:"
                     "collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}.drift{color:#c53030;"
                     "font-weight:bold}h2{margin-top:2em}</style></head><body>";
  page += "<h1>Drift of " + escape(title) + "</h1><p>Current: " + escape(current) +
          ".<br>Reference: " + escape(reference) + ".</p>";
  page += fmt::format(
      "<p><b>{} of {} inputs drifted</b>; the prediction {}. With at most {} current rows a test "
      "decides (p &lt; {}), with more the distance (&gt; {}). Grey: reference; blue: current.</p>",
      report.drifted_inputs, report.inputs.size(), report.prediction.drifted ? "drifted" : "did not",
      thresholds.small_sample, thresholds.p_value, thresholds.distance);
  page +=
      "<table><tr><th>input</th><th>type</th><th>rows</th><th>distance</th><th>PSI</th><th>p-value</th><th>"
      "</th></tr>";
  auto row = [&](const InputDrift& drift) {
    page += fmt::format(
        "<tr><td><a href=\"#{0}\">{0}</a></td><td>{1}</td><td>{2:.0f}</td><td>{3:.3f} {4}</td>"
        "<td>{5:.3f} {6}</td><td>{7:.3g}</td><td class=\"drift\">{8}</td></tr>",
        escape(drift.name), data::column_type_name(drift.type), drift.current_rows, drift.distance,
        drift.distance_name(), drift.psi, drift.psi_band(), drift.p_value, drift.drifted ? "DRIFT" : "");
  };
  for (const auto& drift : report.inputs) row(drift);
  row(report.prediction);
  page += "</table>";
  for (std::size_t index = 0; index <= report.inputs.size(); ++index) {
    bool prediction = index == report.inputs.size();
    const InputDrift& drift = prediction ? report.prediction : report.inputs[index];
    const model::FeatureProfile& feature = prediction ? profile.prediction : profile.inputs[index];
    page += fmt::format("<h2 id=\"{0}\">{0}{1}</h2>", escape(drift.name),
                        drift.drifted ? " <span class=\"drift\">drifted</span>" : "");
    page += bars(drift, slot_labels(feature));
    if (history.size() >= 2) {
      page += "<p>Distance over the window (dashed: the threshold)</p>" +
              line(history, prediction ? SIZE_MAX : index, thresholds.distance);
    }
  }
  return page + "</body></html>\n";
}

}  // namespace slipway::monitor
