#pragma once

// Forward declarations of common/.
namespace rekindle {
enum class errc : unsigned char;
class status;
template <class T>
class expected;
class clock;
class real_clock;
class fake_clock;
}  // namespace rekindle
