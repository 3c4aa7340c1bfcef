#pragma once

#include <sstream>
#include <string>

/// Invariant checks. A broken invariant is a bug in rekindle, not bad input: the process prints
/// file:line, the failed expression and a message, then aborts. Bad input never reaches a check;
/// it is reported through `status`.

namespace rekindle::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& message) noexcept;

template <class... Ts>
std::string check_message(const Ts&... xs) {
  if constexpr (sizeof...(Ts) == 0) {
    return {};
  } else {
    std::ostringstream os;
    (os << ... << xs);
    return os.str();
  }
}

}  // namespace rekindle::detail

/// Aborts with file:line when `cond` is false. Extra arguments are streamed into the message.
#define RK_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::rekindle::detail::check_failed(__FILE__, __LINE__, #cond,                        \
                                       ::rekindle::detail::check_message(__VA_ARGS__)); \
  } while (false)

#define RK_CHECK_EQ(a, b, ...) RK_CHECK((a) == (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)
#define RK_CHECK_NE(a, b, ...) RK_CHECK((a) != (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)
#define RK_CHECK_LT(a, b, ...) RK_CHECK((a) < (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)
#define RK_CHECK_LE(a, b, ...) RK_CHECK((a) <= (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)
#define RK_CHECK_GE(a, b, ...) RK_CHECK((a) >= (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)

/// Returns the status of `expr` from the enclosing function when it is not ok.
#define RK_RETURN_IF_ERROR(expr)        \
  do {                                  \
    if (auto rk_st_ = (expr); !rk_st_.ok()) \
      return rk_st_;                    \
  } while (false)

#define RK_CONCAT_INNER_(a, b) a##b
#define RK_CONCAT_(a, b) RK_CONCAT_INNER_(a, b)

/// Evaluates `expr` (an expected<T>); on error returns its status, else moves the value into `lhs`.
#define RK_ASSIGN_OR_RETURN(lhs, expr) RK_ASSIGN_OR_RETURN_IMPL_(RK_CONCAT_(rk_exp_, __LINE__), lhs, expr)
#define RK_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.has_value())                           \
    return std::move(tmp).error();                \
  lhs = std::move(tmp).value()
