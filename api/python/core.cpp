// rekindle._core: the Python binding of the worker API's C ABI (api/rekindle.h). The torch side
// lives in rekindle/__init__.py; this module moves bytes between tensors' memory and the slot.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "api/rekindle.h"

namespace py = pybind11;

namespace {

py::object error_type;
py::object not_under_rekindle_type;
py::object too_large_type;
py::object order_type;

[[noreturn]] void raise(int code, const std::string& message) {
  py::object type = error_type;
  if (code == RK_ERR_NOT_UNDER_REKINDLE)
    type = not_under_rekindle_type;
  else if (code == RK_ERR_TOO_LARGE)
    type = too_large_type;
  else if (code == RK_ERR_ORDER)
    type = order_type;
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

class rank {
 public:
  explicit rank(rk_rank* h) : h_(h) {}
  ~rank() {
    if (h_)
      rk_finish(h_);
  }
  rank(const rank&) = delete;
  rank& operator=(const rank&) = delete;

  static std::unique_ptr<rank> join() {
    rk_rank* h = nullptr;
    int code;
    {
      py::gil_scoped_release unlocked;
      code = rk_join(&h);
    }
    if (code != RK_OK)
      raise(code, rk_last_error());
    return std::make_unique<rank>(h);
  }

  py::dict info() {
    rk_info i;
    check(rk_info_get(live(), &i));
    py::dict d;
    d["rank"] = i.rank;
    d["world_size"] = i.world_size;
    d["local_rank"] = i.local_rank;
    d["local_world_size"] = i.local_world_size;
    d["epoch"] = i.epoch;
    d["restore_step"] = i.restore_step;
    d["restore_world"] = i.restore_world;
    d["master_addr"] = std::string{i.master_addr};
    d["master_port"] = i.master_port;
    d["snapshot_every"] = i.snapshot_every;
    d["state_bytes"] = i.state_bytes;
    d["collective_timeout_ms"] = i.collective_timeout_ms;
    d["rendezvous_timeout_ms"] = i.rendezvous_timeout_ms;
    return d;
  }

  /// buffers: (name, address, size) of memory the caller keeps alive for the call.
  void snapshot(std::uint64_t step, const std::vector<std::tuple<std::string, std::uintptr_t, std::uint64_t>>& buffers) {
    std::vector<rk_buffer> b;
    b.reserve(buffers.size());
    for (const auto& [name, address, size] : buffers)
      b.push_back({name.c_str(), reinterpret_cast<const void*>(address), size});
    int code;
    {
      py::gil_scoped_release unlocked;
      code = rk_snapshot(live(), step, b.data(), b.size());
    }
    check(code);
  }

  std::tuple<std::uint64_t, std::uint32_t> restore_begin() {
    std::uint64_t step = 0;
    std::uint32_t parts = 0;
    int code;
    {
      py::gil_scoped_release unlocked;
      code = rk_restore_begin(live(), &step, &parts);
    }
    check(code);
    return {step, parts};
  }

  std::vector<std::tuple<std::string, std::uint64_t>> restore_entries(std::uint32_t part) {
    size_t count = 0;
    check(rk_restore_count(live(), part, &count));
    std::vector<std::tuple<std::string, std::uint64_t>> out;
    for (size_t i = 0; i < count; ++i) {
      const char* name = nullptr;
      std::uint64_t size = 0;
      check(rk_restore_entry(live(), part, i, &name, &size));
      out.emplace_back(name, size);
    }
    return out;
  }

  void restore_copy(std::uint32_t part, const std::string& name, std::uintptr_t address, std::uint64_t size) {
    int code;
    {
      py::gil_scoped_release unlocked;
      code = rk_restore_copy(live(), part, name.c_str(), reinterpret_cast<void*>(address), size);
    }
    check(code);
  }

  py::bytes restore_bytes(std::uint32_t part, const std::string& name) {
    for (const auto& [n, size] : restore_entries(part))
      if (n == name) {
        std::string out(size, '\0');
        check(rk_restore_copy(live(), part, name.c_str(), out.data(), size));
        return py::bytes(out);
      }
    raise(RK_ERR_INVALID, "buffer '" + name + "' is not in the restored state");
  }

  void restore_end() { check(rk_restore_end(live())); }
  int step_done(std::uint64_t step, double loss, std::uint64_t tokens) { return status(rk_step_done(live(), step, loss, tokens)); }
  // Seconds (None: not measured) to the C API's nanoseconds.
  void step_times(std::optional<double> compute, std::optional<double> communication, std::optional<double> data) {
    const auto ns = [](const char* what, std::optional<double> s) -> std::uint64_t {
      if (!s)
        return RK_STEP_TIME_UNKNOWN;
      if (!(*s >= 0.0 && *s <= 3600.0)) {
        std::ostringstream text;
        text << "step_done: " << what << "=" << *s << " is not a step's time in seconds (0 to 3600)";
        raise(RK_ERR_INVALID, text.str());
      }
      return static_cast<std::uint64_t>(*s * 1e9);
    };
    check(rk_step_times(live(), ns("compute", compute), ns("communication", communication), ns("data", data)));
  }
  int poll() { return status(rk_poll(live())); }
  int reconfigure(std::uint64_t timeout_ms) {
    int code;
    {
      py::gil_scoped_release unlocked;
      code = rk_reconfigure(live(), timeout_ms);
    }
    if (code == RK_ERR_TIMEOUT)
      return code;
    return status(code);
  }
  void finish() {
    if (h_)
      rk_finish(h_);
    h_ = nullptr;
  }

 private:
  rk_rank* live() {
    if (!h_)
      raise(RK_ERR_ORDER, "this rank has finished (finish() was called)");
    return h_;
  }
  void check(int code) {
    if (code < 0)
      raise(code, rk_error(h_));
  }
  int status(int code) {
    check(code);
    return code;
  }
  rk_rank* h_;
};

/// A checkpoint shard on disk (rekindle.export).
class shard {
 public:
  shard(const std::string& path, std::uint64_t step, std::uint32_t rank) {
    const int code = rk_shard_open(path.c_str(), step, rank, &h_);
    if (code != RK_OK)
      raise(code, rk_last_error());
  }
  ~shard() { rk_shard_close(h_); }
  shard(const shard&) = delete;
  shard& operator=(const shard&) = delete;

  std::vector<std::tuple<std::string, std::uint64_t>> entries() {
    size_t count = 0;
    check(rk_shard_count(h_, &count));
    std::vector<std::tuple<std::string, std::uint64_t>> out;
    for (size_t i = 0; i < count; ++i) {
      const char* name = nullptr;
      std::uint64_t size = 0;
      check(rk_shard_entry(h_, i, &name, &size));
      out.emplace_back(name, size);
    }
    return out;
  }
  void copy(const std::string& name, std::uintptr_t address, std::uint64_t size) {
    check(rk_shard_copy(h_, name.c_str(), reinterpret_cast<void*>(address), size));
  }
  py::bytes bytes(const std::string& name) {
    for (const auto& [n, size] : entries())
      if (n == name) {
        std::string out(size, '\0');
        check(rk_shard_copy(h_, name.c_str(), out.data(), size));
        return py::bytes(out);
      }
    raise(RK_ERR_INVALID, "buffer '" + name + "' is not in the shard");
  }

 private:
  void check(int code) {
    if (code < 0)
      raise(code, rk_shard_error(h_));
  }
  rk_shard* h_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "The worker API's C ABI for Python (use the rekindle package, not this module)";
  error_type = py::reinterpret_steal<py::object>(PyErr_NewException("rekindle.Error", PyExc_RuntimeError, nullptr));
  not_under_rekindle_type =
      py::reinterpret_steal<py::object>(PyErr_NewException("rekindle.NotUnderRekindle", error_type.ptr(), nullptr));
  too_large_type = py::reinterpret_steal<py::object>(PyErr_NewException("rekindle.SnapshotTooLarge", error_type.ptr(), nullptr));
  order_type = py::reinterpret_steal<py::object>(PyErr_NewException("rekindle.OrderError", error_type.ptr(), nullptr));
  m.attr("Error") = error_type;
  m.attr("NotUnderRekindle") = not_under_rekindle_type;
  m.attr("SnapshotTooLarge") = too_large_type;
  m.attr("OrderError") = order_type;
  m.attr("OK") = int{RK_OK};
  m.attr("RECONFIGURE") = int{RK_RECONFIGURE};
  m.attr("FINISHED") = int{RK_FINISHED};
  m.attr("TIMEOUT") = int{RK_ERR_TIMEOUT};
  m.attr("API_VERSION") = int{RK_API_VERSION};
  py::class_<rank>(m, "Rank")
      .def_static("join", &rank::join)
      .def("info", &rank::info)
      .def("snapshot", &rank::snapshot)
      .def("restore_begin", &rank::restore_begin)
      .def("restore_entries", &rank::restore_entries)
      .def("restore_copy", &rank::restore_copy)
      .def("restore_bytes", &rank::restore_bytes)
      .def("restore_end", &rank::restore_end)
      .def("step_done", &rank::step_done)
      .def("step_times", &rank::step_times)
      .def("poll", &rank::poll)
      .def("reconfigure", &rank::reconfigure)
      .def("finish", &rank::finish);
  py::class_<shard>(m, "Shard")
      .def(py::init<const std::string&, std::uint64_t, std::uint32_t>())
      .def("entries", &shard::entries)
      .def("copy", &shard::copy)
      .def("bytes", &shard::bytes);
}
