#include "common/status.hpp"

namespace rekindle {

namespace {
const std::string empty_message;
}  // namespace

status::status(errc code, std::string message)
    : rep_(std::make_unique<rep>(rep{code, std::move(message)})) {}

status::status(const status& other)
    : rep_(other.rep_ ? std::make_unique<rep>(*other.rep_) : nullptr) {}

status& status::operator=(const status& other) {
  if (this != &other)
    rep_ = other.rep_ ? std::make_unique<rep>(*other.rep_) : nullptr;
  return *this;
}

errc status::code() const noexcept {
  return rep_ ? rep_->code : errc::internal;
}

const std::string& status::message() const noexcept {
  return rep_ ? rep_->message : empty_message;
}

std::string status::to_string() const {
  if (ok())
    return "ok";
  std::string out{rekindle::to_string(rep_->code)};
  out += ": ";
  out += rep_->message;
  return out;
}

status status::with_context(std::string_view context) const {
  if (ok())
    return {};
  std::string msg{context};
  msg += ": ";
  msg += rep_->message;
  return status{rep_->code, std::move(msg)};
}

bool operator==(const status& a, const status& b) noexcept {
  if (a.ok() || b.ok())
    return a.ok() == b.ok();
  return a.code() == b.code() && a.message() == b.message();
}

std::ostream& operator<<(std::ostream& os, const status& s) {
  return os << s.to_string();
}

}  // namespace rekindle
