// libFuzzer target: the named-buffer layout a program's state arrives in through the worker API
// (and leaves in, to a slot): whatever the bytes, an error or views inside them that lay out again
// to the same names and contents.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <vector>

#include "common/check.hpp"
#include "storage/named_buffers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rekindle::storage;
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size};
  auto read = read_named_buffers(bytes);
  if (!read) {
    RK_CHECK(!read.error().message().empty(), "a refused layout says why");
    return 0;
  }
  std::set<std::string> names;
  for (const auto& b : *read) {
    RK_CHECK(b.bytes.empty() || (b.bytes.data() >= bytes.data() && b.bytes.data() + b.bytes.size() <= bytes.data() + size),
             "a buffer's view lies inside the layout");
    RK_CHECK(names.insert(std::string{b.name}).second, "names are unique");
  }
  // Laid out again, it reads back the same.
  auto need = named_buffers_size(*read);
  if (!need || *need > (1u << 24))
    return 0;
  std::vector<std::byte> again(*need);
  auto written = write_named_buffers(again, *read);
  RK_CHECK(written.has_value(), "a layout that was read can be written");
  auto back = read_named_buffers(std::span<const std::byte>{again}.first(written->first));
  RK_CHECK(back.has_value() && back->size() == read->size(), "and read back");
  for (std::size_t i = 0; i < read->size(); ++i)
    RK_CHECK((*back)[i].name == (*read)[i].name && (*back)[i].bytes.size() == (*read)[i].bytes.size() &&
                 ((*read)[i].bytes.empty() ||
                  std::memcmp((*back)[i].bytes.data(), (*read)[i].bytes.data(), (*read)[i].bytes.size()) == 0),
             "with the same names and contents");
  return 0;
}
