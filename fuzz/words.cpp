// libFuzzer target: the admin shell's line parser (split_shell_words): whatever the line, words or
// a refusal, and the words quoted again read back as the same words.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/check.hpp"
#include "common/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle;
  const std::string_view line{reinterpret_cast<const char*>(data), size};
  const auto words = split_shell_words(line);
  if (!words) {
    RK_CHECK(!words.error().message().empty(), "a refused line says why");
    return 0;
  }
  RK_CHECK(words->size() <= size, "no more words than characters");
  std::string again;
  for (const auto& w : *words)
    again += quote_shell_word(w) + " ";
  if (again.size() > max_shell_line)
    return 0;
  const auto back = split_shell_words(again);
  RK_CHECK(back.has_value() && *back == *words, "quoted words read back as themselves");
  return 0;
}
