#pragma once

// Forward declarations of config/.
namespace rekindle::config {
struct spec;
struct node_spec;
struct diagnostic;
struct load_result;
}  // namespace rekindle::config
