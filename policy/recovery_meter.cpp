#include "policy/recovery_meter.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <type_traits>

#include "common/text.hpp"

namespace rekindle::policy {

namespace {

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string duration_text(double s) {
  return format_duration(std::chrono::nanoseconds{static_cast<std::int64_t>(s * 1e9)});
}

}  // namespace

double recovery_record::detect_s() const { return injected_ns > 0 ? seconds(detected_ns - injected_ns) : 0.0; }
double recovery_record::respawn_s() const { return ready_ns > 0 ? seconds(ready_ns - detected_ns) : 0.0; }
double recovery_record::rendezvous_s() const {
  return started_ns > 0 ? seconds(started_ns - ready_ns) + seconds(connect_ns) : 0.0;
}
double recovery_record::restore_s() const { return seconds(restore_ns); }
double recovery_record::first_step_s() const { return seconds(first_step_took_ns); }
double recovery_record::between_s() const {
  return first_step_ns > 0 ? total_s() - detect_s() - respawn_s() - rendezvous_s() - restore_s() - first_step_s() : 0.0;
}
double recovery_record::total_s() const {
  return first_step_ns > 0 ? seconds(first_step_ns - (injected_ns > 0 ? injected_ns : detected_ns)) : 0.0;
}

std::string recovery_record::summary() const {
  return "detect " + duration_text(detect_s()) + " · respawn " + duration_text(respawn_s()) + " · rendezvous " +
         duration_text(rendezvous_s()) + " · restore " + duration_text(restore_s()) + " (" + source + ", step " +
         std::to_string(restored_step) + ") · first step " + duration_text(first_step_s()) + " · between " +
         (between_s() < 0 ? "-" + duration_text(-between_s()) : duration_text(between_s())) + " · total " +
         duration_text(total_s()) + " · lost " + std::to_string(steps_lost()) + " step(s)";
}

std::vector<std::pair<std::string, std::string>> to_fields(const recovery_record& r) {
  const auto n = [](std::int64_t v) { return std::to_string(std::max<std::int64_t>(v, 0)); };
  return {{"cause", r.cause},
          {"recovery_epoch", std::to_string(r.epoch)},
          {"failed_at_step", std::to_string(r.failed_at_step)},
          {"restored_step", std::to_string(r.restored_step)},
          {"source", r.source},
          {"injected_ns", n(r.injected_ns)},
          {"detected_ns", n(r.detected_ns)},
          {"ready_ns", n(r.ready_ns)},
          {"started_ns", n(r.started_ns)},
          {"connect_ns", n(r.connect_ns)},
          {"restore_ns", n(r.restore_ns)},
          {"first_step_ns", n(r.first_step_ns)},
          {"first_step_took_ns", n(r.first_step_took_ns)},
          {"total_s", std::to_string(r.total_s())},
          {"steps_lost", std::to_string(r.steps_lost())}};
}

std::optional<recovery_record> from_fields(const std::vector<std::pair<std::string, std::string>>& fields,
                                           std::optional<rank_id> rank, std::optional<node_id> node) {
  const auto text = [&](std::string_view key) -> const std::string* {
    for (const auto& [k, v] : fields)
      if (k == key)
        return &v;
    return nullptr;
  };
  recovery_record r;
  const auto number = [&](std::string_view key, auto& out) {
    const auto* v = text(key);
    if (!v)
      return false;
    auto n = parse_whole_number(*v, 0, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
    if (!n)
      return false;
    out = static_cast<std::remove_reference_t<decltype(out)>>(*n);
    return true;
  };
  const auto* cause = text("cause");
  const auto* source = text("source");
  if (!cause || !source)
    return std::nullopt;
  r.cause = *cause;
  r.source = *source;
  if (!number("recovery_epoch", r.epoch) || !number("failed_at_step", r.failed_at_step) ||
      !number("restored_step", r.restored_step) || !number("injected_ns", r.injected_ns) ||
      !number("detected_ns", r.detected_ns) || !number("ready_ns", r.ready_ns) ||
      !number("started_ns", r.started_ns) || !number("connect_ns", r.connect_ns) ||
      !number("restore_ns", r.restore_ns) || !number("first_step_ns", r.first_step_ns))
    return std::nullopt;
  (void)number("first_step_took_ns", r.first_step_took_ns);  // absent in records of older versions
  r.rank = rank;
  r.node = node;
  r.done = true;
  return r;
}

void recovery_meter::restore(std::vector<recovery_record> done) {
  if (!records_.empty())
    return;
  records_ = std::move(done);
}

recovery_record* recovery_meter::current() { return recovering() ? &records_[*open_] : nullptr; }

bool recovery_meter::open(std::string cause, std::optional<rank_id> rank, std::optional<node_id> node,
                          std::uint64_t step, std::int64_t injected_ns, std::int64_t now_ns) {
  if (recovering())
    return false;
  recovery_record r;
  r.cause = std::move(cause);
  r.rank = rank;
  r.node = node;
  r.failed_at_step = step;
  r.injected_ns = injected_ns;
  r.detected_ns = now_ns;
  records_.push_back(std::move(r));
  open_ = records_.size() - 1;
  return true;
}

void recovery_meter::on_epoch(epoch_t epoch) {
  if (auto* r = current())
    r->epoch = epoch.value();
}

void recovery_meter::on_reached(std::uint64_t step) {
  if (auto* r = current(); r && r->started_ns == 0)
    r->failed_at_step = std::max(r->failed_at_step, step);
}

void recovery_meter::on_ready(std::int64_t now_ns) {
  if (auto* r = current(); r && r->ready_ns == 0)
    r->ready_ns = now_ns;
}

void recovery_meter::on_step(std::uint64_t step, std::int64_t took_ns) {
  if (auto* r = current(); r && r->started_ns > 0 && step == r->restored_step + 1)
    r->first_step_took_ns = std::max(r->first_step_took_ns, took_ns);
}

void recovery_meter::on_start(step_t restore_step, std::string source, std::int64_t now_ns) {
  if (auto* r = current()) {
    r->started_ns = now_ns;
    r->restored_step = restore_step.value();
    r->source = std::move(source);
  }
}

void recovery_meter::on_restored(std::int64_t connect_ns, std::int64_t restore_ns, const std::string& source) {
  if (auto* r = current()) {
    r->connect_ns = std::max(r->connect_ns, connect_ns);
    r->restore_ns = std::max(r->restore_ns, restore_ns);
    if (source != "none" && source != to_string(copy_kind::local_slot))
      r->source = source;
  }
}

const recovery_record* recovery_meter::on_progress(std::uint64_t slowest_step, std::int64_t now_ns) {
  auto* r = current();
  if (r == nullptr || r->started_ns == 0 || slowest_step <= r->restored_step)
    return nullptr;
  r->first_step_ns = now_ns;
  r->done = true;
  return r;
}

}  // namespace rekindle::policy
