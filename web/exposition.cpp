#include "web/exposition.hpp"

#include <charconv>
#include <cmath>

namespace rekindle::web {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

// HELP text escapes backslash and newline; label values also the double quote.
std::string escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

// `{a="x",b="y"}`, or "" without labels; false when a label name is invalid.
bool write_labels(std::string& out, const labels& l) {
  if (l.empty())
    return true;
  out += '{';
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (!valid_label_name(l[i].first))
      return false;
    if (i > 0)
      out += ',';
    out += l[i].first;
    out += "=\"";
    out += escape(l[i].second, true);
    out += '"';
  }
  out += '}';
  return true;
}

}  // namespace

bool valid_metric_name(std::string_view name) noexcept {
  if (name.empty() || !(name_start(name[0]) || name[0] == ':'))
    return false;
  for (const char c : name)
    if (!(name_char(c) || c == ':'))
      return false;
  return true;
}

bool valid_label_name(std::string_view name) noexcept {
  if (name.empty() || !name_start(name[0]) || name.starts_with("__"))
    return false;
  for (const char c : name)
    if (!name_char(c))
      return false;
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return {buf, r.ptr};
}

exposition::family* exposition::find_or_add(std::string_view name, std::string_view help, std::string_view type) {
  if (!valid_metric_name(name) || (type == "counter" && !name.ends_with("_total"))) {
    ++rejected_;
    return nullptr;
  }
  if (auto it = families_.find(name); it != families_.end()) {
    if (it->second.type != type) {
      ++rejected_;
      return nullptr;
    }
    return &it->second;
  }
  order_.emplace_back(name);
  return &families_.emplace(std::string{name}, family{std::string{help}, std::string{type}, {}}).first->second;
}

void exposition::declare(std::string_view name, std::string_view help, std::string_view type) {
  (void)find_or_add(name, help, type);
}

void exposition::sample(std::string_view name, std::string_view help, std::string_view type, double value,
                        const labels& l) {
  auto* f = find_or_add(name, help, type);
  if (f == nullptr)
    return;
  std::string line{name};
  if (!write_labels(line, l)) {
    ++rejected_;
    return;
  }
  f->lines.push_back(line + ' ' + format_value(value));
}

void exposition::gauge(std::string_view name, std::string_view help, double value, labels l) {
  sample(name, help, "gauge", value, l);
}

void exposition::counter(std::string_view name, std::string_view help, double value, labels l) {
  sample(name, help, "counter", value, l);
}

void exposition::histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                           const std::vector<double>& observations, labels l) {
  auto* f = find_or_add(name, help, "histogram");
  if (f == nullptr)
    return;
  for (std::size_t i = 1; i < bounds.size(); ++i)
    if (!(bounds[i - 1] < bounds[i])) {
      ++rejected_;
      return;
    }
  for (const auto& [k, v] : l)
    if (k == "le") {
      ++rejected_;
      return;
    }
  std::vector<std::string> lines;
  double sum = 0;
  for (const double o : observations)
    sum += o;
  auto bucket = [&](const std::string& le, std::size_t count) {
    labels with = l;
    with.emplace_back("le", le);
    std::string line = std::string{name} + "_bucket";
    if (!write_labels(line, with))
      return false;
    lines.push_back(line + ' ' + std::to_string(count));
    return true;
  };
  for (const double b : bounds) {
    std::size_t n = 0;
    for (const double o : observations)
      n += o <= b ? 1 : 0;
    if (!bucket(format_value(b), n)) {
      ++rejected_;
      return;
    }
  }
  (void)bucket("+Inf", observations.size());
  std::string tail;
  (void)write_labels(tail, l);
  lines.push_back(std::string{name} + "_sum" + tail + ' ' + format_value(sum));
  lines.push_back(std::string{name} + "_count" + tail + ' ' + std::to_string(observations.size()));
  f->lines.insert(f->lines.end(), lines.begin(), lines.end());
}

std::string exposition::text() const {
  std::string out;
  for (const auto& name : order_) {
    const auto& f = families_.find(name)->second;
    out += "# HELP " + name + ' ' + escape(f.help, false) + '\n';
    out += "# TYPE " + name + ' ' + f.type + '\n';
    for (const auto& line : f.lines)
      out += line + '\n';
  }
  return out;
}

}  // namespace rekindle::web
