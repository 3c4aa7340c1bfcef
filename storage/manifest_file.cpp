#include "storage/manifest_file.hpp"

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "common/text.hpp"
#include "storage/shard_file.hpp"

namespace rekindle::storage {

using nlohmann::json;

std::string manifest_file_name(step_t step) {
  auto name = shard_file_name(step, rank_id{0});
  return name.substr(0, name.find("-r")) + ".manifest.json";
}

std::string manifest_file_text(const checkpoint_manifest& m) {
  json j;
  j["step"] = m.step.value();
  j["world_size"] = m.world_size;
  j["layout_version"] = m.layout_version;
  j["shards"] = json::array();
  for (const auto& s : m.shards)
    j["shards"].push_back({{"rank", s.rank.value()}, {"file", s.file}, {"size", s.size}, {"checksum", s.checksum}});
  return j.dump(2) + "\n";
}

expected<checkpoint_manifest> parse_manifest_file(std::string_view text, const std::string& where) {
  const auto bad = [&](const std::string& what) { return status{errc::invalid_argument, where + ": " + what}; };
  // A manifest is two levels deep; a deeper one is refused before it is parsed.
  if (const auto depth = json_nesting_depth(text); depth > 16)
    return bad("nested " + std::to_string(depth) + " levels deep; a manifest has 2");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return bad(std::string{"not JSON ("} + e.what() + ")");
  }
  const auto number = [&](const json& o, const std::string& at, const char* key) -> expected<std::uint64_t> {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number_unsigned())
      return bad(at + key + " is missing or not a whole number");
    return o[key].get<std::uint64_t>();
  };
  checkpoint_manifest m;
  m.committed = true;
  RK_ASSIGN_OR_RETURN(auto step, number(j, "", "step"));
  m.step = step_t{step};
  RK_ASSIGN_OR_RETURN(auto world, number(j, "", "world_size"));
  if (world < 1 || world > max_manifest_world)
    return bad("world_size " + std::to_string(world) + " is not from 1 to " + std::to_string(max_manifest_world));
  m.world_size = static_cast<std::uint32_t>(world);
  if (j.contains("layout_version")) {
    RK_ASSIGN_OR_RETURN(auto layout, number(j, "", "layout_version"));
    if (layout > UINT32_MAX)
      return bad("layout_version " + std::to_string(layout) + " is out of range");
    m.layout_version = static_cast<std::uint32_t>(layout);
  }
  if (!j.contains("shards") || !j["shards"].is_array())
    return bad("shards is missing or not a list");
  if (j["shards"].size() > world)
    return bad(std::to_string(j["shards"].size()) + " shards for a world_size of " + std::to_string(world) +
               " (one shard per rank)");
  for (std::size_t i = 0; i < j["shards"].size(); ++i) {
    const auto& s = j["shards"][i];
    const auto at = "shards[" + std::to_string(i) + "].";
    shard_entry sh;
    RK_ASSIGN_OR_RETURN(auto rank, number(s, at, "rank"));
    if (rank >= world)
      return bad(at + "rank " + std::to_string(rank) + " is not below world_size " + std::to_string(world));
    sh.rank = rank_id{static_cast<std::uint32_t>(rank)};
    RK_ASSIGN_OR_RETURN(sh.size, number(s, at, "size"));
    RK_ASSIGN_OR_RETURN(sh.checksum, number(s, at, "checksum"));
    if (!s.contains("file") || !s["file"].is_string())
      return bad(at + "file is missing or not text");
    sh.file = s["file"].get<std::string>();
    // A shard lies in the checkpoint's own directory: a bare file name, never a path.
    if (sh.file.empty() || sh.file == "." || sh.file == ".." || sh.file.find('/') != std::string::npos ||
        sh.file.find('\0') != std::string::npos)
      return bad(at + "file '" + sh.file + "' is not a file name in the checkpoint's directory");
    m.shards.push_back(std::move(sh));
  }
  return m;
}

expected<checkpoint_manifest> read_manifest_file(const std::filesystem::path& file) {
  auto text = read_file_bounded(file, file_limits::manifest, "checkpoint manifest");
  if (!text)
    return status{text.error().code(), file.string() + ": " + text.error().message()};
  return parse_manifest_file(*text, file.string());
}

status write_manifest_file(const std::filesystem::path& dir, const checkpoint_manifest& m) {
  return write_file_atomically(dir / manifest_file_name(m.step), manifest_file_text(m));
}

}  // namespace rekindle::storage
