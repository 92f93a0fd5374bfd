// Registered LLMs: the models whose serving version is a GGUF file, each loaded in place from the
// artifact store with a generation engine, for the OpenAI API beside the v2 protocol.
#include <fstream>

#include <fmt/format.h>

#include "slipway/serve.h"

namespace slipway::serve {

bool is_gguf_artifact(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[4] = {};
  return file.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::vector<ServedLlm> load_registered_llms(registry::Registry& registry, const llm::EngineOptions& options) {
  std::vector<ServedLlm> served;
  auto models = registry.models().list();
  if (!models.ok()) {
    log_error("cannot list the registered models: " + models.status().message());
    return served;
  }
  for (const auto& summary : *models) {
    auto version = registry.models().resolve(summary.name, {});  // production, else the newest
    if (!version.ok()) continue;
    std::string path = registry.artifacts().path_for(version->bundle_sha256);
    if (!is_gguf_artifact(path)) continue;
    auto loaded = [&]() -> Result<std::shared_ptr<llm::Engine>> {
      try {  // a model too large for memory fails alone, not the server
        SLIPWAY_ASSIGN_OR_RETURN(auto file, llm::GgufFile::open(path));
        SLIPWAY_ASSIGN_OR_RETURN(auto tokenizer, llm::Tokenizer::from_gguf(file));
        SLIPWAY_ASSIGN_OR_RETURN(auto model, llm::LlamaModel::from_file(std::move(file)));
        SLIPWAY_ASSIGN_OR_RETURN(auto engine, llm::Engine::start(std::move(model), std::move(tokenizer), options));
        return std::shared_ptr<llm::Engine>(std::move(engine));
      } catch (const std::bad_alloc&) {
        return resource_exhausted("not enough memory to load it");
      }
    }();
    if (!loaded.ok()) {
      log_error(fmt::format("LLM '{}' version {} cannot be served: {}", summary.name, version->version,
                            loaded.status().message()));
      continue;
    }
    log_info(fmt::format("LLM {}@{} served with the OpenAI API under /v1", summary.name, version->version));
    served.push_back({summary.name, std::move(*loaded), version->created_ms / 1000});
  }
  return served;
}

}  // namespace slipway::serve
