// Chat prompts in the three formats most GGUF chat models use. A file's tokenizer.chat_template
// is a Jinja program; rather than run Jinja, the format is recognized by the markers its text
// must contain, and rendered here exactly as the reference template renders it:
// - Llama 2 (meta-llama/Llama-2-7b-chat-hf): "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]
//   {assistant} </s><s>[INST] {user} [/INST]", each content stripped of surrounding whitespace,
//   the system message folded into the first user turn, and turns alternating user, assistant.
//   The model answers after "[/INST]", so there is no generation prompt to add.
// - Llama 3 (meta-llama/Meta-Llama-3-8B-Instruct): "<|begin_of_text|>" then, per message,
//   "<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>"; the generation
//   prompt is the assistant's header. (Llama 3.1's default system text with today's date is not
//   added.)
// - ChatML (Qwen, Hermes, ...): "<|im_start|>{role}\n{content}<|im_end|>\n" per message; the
//   generation prompt is "<|im_start|>assistant\n". It names no BOS, so the tokenizer's own goes
//   first when it adds one, as llama.cpp's server adds it when tokenizing the prompt.
// BOS and EOS are text in the result (the tokenizer's own token texts), so a prompt is encoded
// with add_special = false and parse_special = true.
#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

enum class ChatFormat { kLlama2, kLlama3, kChatMl };

// Jinja's trim and Python's strip, over ASCII whitespace (other Unicode spaces are kept).
std::string_view trimmed(std::string_view text) {
  constexpr std::string_view kWhitespace = " \t\n\r\v\f";
  std::size_t first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kWhitespace) + 1 - first);
}

// The template's first characters on one line, for an error message.
std::string excerpt(std::string_view text) {
  constexpr std::size_t kLength = 60;
  std::string shown;
  for (char character : text.substr(0, kLength)) {
    if (character == '\n') {
      shown += "\\n";
    } else {
      shown += character;
    }
  }
  return text.size() > kLength ? shown + "..." : shown;
}

Result<ChatFormat> chat_format(const GgufFile& file, const Tokenizer& tokenizer, std::string_view template_name) {
  if (!template_name.empty()) {
    if (template_name == "llama2") return ChatFormat::kLlama2;
    if (template_name == "llama3") return ChatFormat::kLlama3;
    if (template_name == "chatml") return ChatFormat::kChatMl;
    return invalid_argument(fmt::format(
        "the chat template name '{}' is not one Slipway renders: \"llama2\", \"llama3\" or \"chatml\"", template_name));
  }
  const GgufValue* value = file.find("tokenizer.chat_template");
  if (value == nullptr) return tokenizer.find("<|im_start|>") >= 0 ? ChatFormat::kChatMl : ChatFormat::kLlama2;
  const std::string* text = value->as_string();
  if (text == nullptr) {
    return invalid_argument(fmt::format("{}: tokenizer.chat_template is a {}, not a string", file.source(),
                                        gguf_value_type_name(value->type())));
  }
  auto contains = [&](std::string_view marker) { return text->find(marker) != std::string::npos; };
  if (contains("<|start_header_id|>")) return ChatFormat::kLlama3;
  // Phi-4's template also opens turns with <|im_start|>, but separates the role with <|im_sep|>.
  if (contains("<|im_start|>") && !contains("<|im_sep|>")) return ChatFormat::kChatMl;
  // Mistral's templates use [INST] too, but not Llama 2's <<SYS>> block (nor its spacing).
  if (contains("[INST]") && contains("<<SYS>>")) return ChatFormat::kLlama2;
  // No Unimplemented code exists in core.h's vocabulary: the model, not the request, is what
  // this engine cannot serve, hence FailedPrecondition.
  return failed_precondition(
      fmt::format("{}: the chat template \"{}\" is not of a shape Slipway renders (Llama 2's [INST] with <<SYS>>, "
                  "Llama 3's <|start_header_id|>, ChatML's <|im_start|>); name one with template_name to use it",
                  file.source(), excerpt(*text)));
}

// A special token's text, or `fallback` when the vocabulary has no such token.
std::string special_text(const Tokenizer& tokenizer, std::int32_t token, std::string_view fallback) {
  std::string text = token >= 0 ? tokenizer.piece(token, true) : std::string();
  return text.empty() ? std::string(fallback) : text;
}

Result<std::string> render_llama2(const Tokenizer& tokenizer, std::span<const ChatMessage> messages) {
  const std::string bos = special_text(tokenizer, tokenizer.bos(), "<s>");
  const std::string eos = special_text(tokenizer, tokenizer.eos(), "</s>");
  std::string_view system;
  bool has_system = !messages.empty() && messages[0].role == "system";
  if (has_system) {
    system = messages[0].content;
    messages = messages.subspan(1);
    if (messages.empty()) {
      return invalid_argument(
          "Llama 2's chat format places the system message in the first user turn, and there is none");
    }
  }
  std::string prompt;
  for (std::size_t turn = 0; turn < messages.size(); ++turn) {
    const ChatMessage& message = messages[turn];
    const std::string_view expected = turn % 2 == 0 ? "user" : "assistant";
    if (message.role != expected) {
      return invalid_argument(fmt::format(
          "Llama 2's chat format has no place for a '{}' message at {}: after an optional first system message, turns "
          "alternate user, assistant, user, ...",
          message.role, turn + (has_system ? 1 : 0)));
    }
    if (turn % 2 == 1) {
      prompt += fmt::format(" {} {}", trimmed(message.content), eos);
      continue;
    }
    std::string content = message.content;
    if (turn == 0 && has_system) content = fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", system, message.content);
    prompt += fmt::format("{}[INST] {} [/INST]", bos, trimmed(content));
  }
  return prompt;
}

Result<std::string> render_chat_format(ChatFormat format, const Tokenizer& tokenizer,
                                       std::span<const ChatMessage> messages, bool add_generation_prompt) {
  if (format == ChatFormat::kLlama2) return render_llama2(tokenizer, messages);
  const bool llama3 = format == ChatFormat::kLlama3;
  std::string prompt;
  if (llama3) {
    prompt = special_text(tokenizer, tokenizer.bos(), "<|begin_of_text|>");
  } else if (tokenizer.adds_bos() && tokenizer.bos() >= 0) {
    prompt = tokenizer.piece(tokenizer.bos(), true);
  }
  for (std::size_t index = 0; index < messages.size(); ++index) {
    const ChatMessage& message = messages[index];
    // Each role the reference templates use; any other text would land inside the header,
    // where a role such as "user<|eot_id|>" could forge turns.
    const std::string_view role = message.role;
    bool known =
        role == "system" || role == "user" || role == "assistant" || role == "tool" || (llama3 && role == "ipython");
    if (!known) {
      return invalid_argument(
          fmt::format("the {} chat format has no place for a '{}' message at {}; its roles are {}",
                      llama3 ? "Llama 3" : "ChatML", message.role, index,
                      llama3 ? "system, user, assistant, tool and ipython" : "system, user, assistant and tool"));
    }
    if (llama3) {
      prompt += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", role, trimmed(message.content));
    } else {
      prompt += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", role, message.content);
    }
  }
  if (add_generation_prompt) {
    prompt += llama3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n" : "<|im_start|>assistant\n";
  }
  return prompt;
}

}  // namespace

Result<std::string> render_chat(const GgufFile& file, const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                bool add_generation_prompt, std::string_view template_name) {
  SLIPWAY_ASSIGN_OR_RETURN(ChatFormat format, chat_format(file, tokenizer, template_name));
  if (messages.empty()) return invalid_argument("a chat prompt needs at least one message");
  return render_chat_format(format, tokenizer, messages, add_generation_prompt);
}

}  // namespace slipway::llm
