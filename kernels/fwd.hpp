#pragma once

#include <cstdint>

// Forward declarations of kernels/.
namespace rekindle::kernels {
struct model_shape;
struct tensor_info;
class param_layout;
struct adamw_hyper;
struct adamw_step;
template <class T>
class host_array;
template <class T>
class cpu_ops;
template <class Ops>
class transformer;
class device_buffer;
class backend;
struct backend_options;
struct device_request;
enum class device_kind : std::uint8_t;
}  // namespace rekindle::kernels
