// The module layering of docs/architecture.md ("Layers"), checked against every #include and
// against the library dependencies CMakeLists.txt declares.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using Graph = std::map<std::string, std::set<std::string>>;

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::set<std::string> split_names(const std::string& text) {
  std::set<std::string> names;
  std::regex name("[a-z_]+");
  for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) names.insert(it->str());
  return names;
}

// The table between the "layers" markers of docs/architecture.md.
Graph documented_layers() {
  std::string text = read_text(fs::path(slipway::testing::source_dir()) / "docs/architecture.md");
  auto begin = text.find("<!-- layers: begin -->");
  auto end = text.find("<!-- layers: end -->");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  std::istringstream table(text.substr(begin, end - begin));
  Graph graph;
  std::string line;
  std::regex row(R"(^\|\s*([a-z_]+)\s*\|([^|]*)\|)");
  while (std::getline(table, line)) {
    std::smatch match;
    if (!std::regex_search(line, match, row) || match[1] == "module") continue;
    graph[match[1]] = split_names(match[2]);
  }
  return graph;
}

// slipway_module(NAME ... DEPENDS ... PRIVATE_DEPENDS ...): the slipway_* libraries it names.
Graph declared_dependencies() {
  std::string text = read_text(fs::path(slipway::testing::source_dir()) / "CMakeLists.txt");
  Graph graph;
  std::regex module(R"(slipway_module\((\w+)([^)]*)\))");
  std::regex library(R"(slipway_(\w+))");
  for (std::sregex_iterator it(text.begin(), text.end(), module), end; it != end; ++it) {
    std::string body = (*it)[2];
    auto& dependencies = graph[(*it)[1]];
    for (std::sregex_iterator dep(body.begin(), body.end(), library); dep != end; ++dep) {
      if ((*dep)[1] != "warnings") dependencies.insert((*dep)[1]);
    }
  }
  return graph;
}

std::set<std::string> reachable(const Graph& graph, const std::string& start) {
  std::set<std::string> seen{start};
  std::vector<std::string> stack{start};
  while (!stack.empty()) {
    std::string name = stack.back();
    stack.pop_back();
    auto found = graph.find(name);
    if (found == graph.end()) continue;
    for (const auto& next : found->second) {
      if (seen.insert(next).second) stack.push_back(next);
    }
  }
  return seen;
}

TEST(Layering, CMakeDeclaresTheDocumentedDependencies) {
  Graph documented = documented_layers();
  Graph declared = declared_dependencies();
  ASSERT_FALSE(documented.empty());
  for (const auto& [module, dependencies] : declared) {
    ASSERT_TRUE(documented.count(module)) << "module '" << module << "' is missing from docs/architecture.md";
    EXPECT_EQ(dependencies, documented.at(module)) << "module '" << module << "'";
  }
  for (const auto& [module, dependencies] : documented) {
    EXPECT_TRUE(declared.count(module)) << "docs/architecture.md lists '" << module << "', which CMake does not build";
    for (const auto& dependency : dependencies) {
      EXPECT_FALSE(reachable(documented, dependency).count(module))
          << module << " and " << dependency << " form a cycle";
    }
  }
}

TEST(Layering, EveryIncludeRespectsTheLayers) {
  Graph documented = documented_layers();
  fs::path root(slipway::testing::source_dir());
  // slipway/<module>.h, or a concept of a module grown past one header: slipway/<module>/<concept>.h.
  std::regex public_include(R"(#include\s+"slipway/(\w+)(/\w+)?\.h")");
  std::regex private_include(R"(#include\s+"(\w+)/[\w./]+")");
  std::vector<std::string> violations;
  auto check = [&](const fs::path& file, const std::string& module) {
    std::set<std::string> allowed = reachable(documented, module);
    std::string text = read_text(file);
    std::string where = fs::relative(file, root).string();
    for (std::sregex_iterator it(text.begin(), text.end(), public_include), end; it != end; ++it) {
      if (!allowed.count((*it)[1])) violations.push_back(where + " includes " + it->str().substr(9));
    }
    for (std::sregex_iterator it(text.begin(), text.end(), private_include), end; it != end; ++it) {
      std::string owner = (*it)[1];
      if (owner != "slipway" && documented.count(owner) && owner != module) {
        violations.push_back(where + " includes " + owner + "'s private header " + it->str().substr(9));
      }
    }
  };
  std::size_t files = 0;
  for (const auto& [module, dependencies] : documented) {
    fs::path header = root / "include/slipway" / (module + ".h");
    if (fs::exists(header)) {
      check(header, module);
      ++files;
    }
    if (fs::is_directory(root / "include/slipway" / module)) {
      for (const auto& entry : fs::directory_iterator(root / "include/slipway" / module)) {
        check(entry.path(), module);
        ++files;
      }
    }
    if (!fs::exists(root / "src" / module)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / "src" / module)) {
      if (!entry.is_regular_file()) continue;
      check(entry.path(), module);
      ++files;
    }
  }
  EXPECT_GT(files, 40u);
  for (const auto& violation : violations) ADD_FAILURE() << violation;
}

// The check itself: an upward include is caught.
TEST(Layering, AnUpwardIncludeIsCaught) {
  Graph documented = documented_layers();
  EXPECT_FALSE(reachable(documented, "model").count("serve"));
  EXPECT_FALSE(reachable(documented, "core").count("data"));
  EXPECT_TRUE(reachable(documented, "serve").count("core"));
}

}  // namespace
