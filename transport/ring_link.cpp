#include "transport/ring_link.hpp"

#include <atomic>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

#include <sched.h>

#include "common/check.hpp"
#include "transport/ucx.hpp"

namespace rekindle::transport::detail {

void on_send_done(void* request, ucs_status_t s, void* user_data) {
  auto* r = static_cast<request_record*>(user_data);
  r->result = s;
  r->done = true;
  r->request = nullptr;
  ucp_request_free(request);
}

void on_recv_done(void* request, ucs_status_t s, const ucp_tag_recv_info_t* info, void* user_data) {
  if (info != nullptr)
    static_cast<request_record*>(user_data)->length = info->length;
  on_send_done(request, s, user_data);
}

void track(request_record& r, void* req) {
  if (req == nullptr) {
    r.done = true;
  } else if (UCS_PTR_IS_ERR(req)) {
    r.done = true;
    r.result = UCS_PTR_STATUS(req);
  } else {
    r.request = req;
  }
}

void idle_wait(std::chrono::steady_clock::duration idle) {
  using namespace std::chrono_literals;
  if (idle < 20us)
    return;
  if (idle < 2ms)
    sched_yield();
  else
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(idle / 8, 1ms));
}

namespace {

std::atomic_ref<std::uint64_t> word(std::byte* at) {
  return std::atomic_ref<std::uint64_t>{*reinterpret_cast<std::uint64_t*>(at)};
}

// Header cache lines of a mailbox.
std::byte* consumed_at(std::byte* base) { return base; }
std::byte* slot_header(std::byte* base, std::size_t slot) { return base + 64 * (1 + slot); }
std::byte* slot_data(std::byte* base, const mailbox_layout& l, std::size_t slot) {
  return base + l.header_size() + slot * l.slot_size;
}

std::string describe_tag(std::uint64_t tag) {
  return "call " + std::to_string((tag >> 32) & 0xffff) + " step " + std::to_string((tag >> 20) & 0xfff) + " chunk " +
         std::to_string(tag & 0xfffff);
}

class shm_receiver final : public ring_receiver {
 public:
  explicit shm_receiver(shm_mailbox& mailbox) : mailbox_(mailbox) {}

  void begin_call(std::uint32_t, std::vector<std::pair<std::uint64_t, std::size_t>> expected) override {
    expected_ = std::move(expected);
    index_ = 0;
  }

  const std::byte* try_receive() override {
    const auto& l = mailbox_.layout();
    const std::size_t slot = static_cast<std::size_t>((next_ - 1) % l.slots);
    std::byte* header = slot_header(mailbox_.base(), slot);
    if (word(header).load(std::memory_order_acquire) != next_)
      return nullptr;
    std::uint64_t tag = 0, len = 0;
    std::memcpy(&tag, header + 8, 8);
    std::memcpy(&len, header + 16, 8);
    const auto& [want_tag, want_len] = expected_[index_];
    if (tag != want_tag || len != want_len) {
      if (error_.ok())
        error_ = status{errc::internal, "ring stream out of step: expected " + describe_tag(want_tag) + " (" +
                                            std::to_string(want_len) + " bytes), the left neighbour sent " +
                                            describe_tag(tag) + " (" + std::to_string(len) + " bytes)"};
      return nullptr;
    }
    return slot_data(mailbox_.base(), l, slot);
  }

  void release() override {
    word(consumed_at(mailbox_.base())).store(next_, std::memory_order_release);
    ++next_;
    ++index_;
  }

  bool call_may_end() override { return true; }
  status error() const override { return error_; }
  bool wind_down() override { return true; }

 private:
  shm_mailbox& mailbox_;
  std::uint64_t next_ = 1;
  std::vector<std::pair<std::uint64_t, std::size_t>> expected_;
  std::size_t index_ = 0;
  status error_;
};

class shm_sender final : public ring_sender {
 public:
  shm_sender(std::unique_ptr<mapped_region> mailbox, mailbox_layout layout)
      : mailbox_(std::move(mailbox)), base_(mailbox_->base()), layout_(layout) {}

  void begin_call(std::uint32_t) override {}

  bool try_send(std::uint64_t tag, const std::byte* data, std::size_t len) override {
    RK_CHECK_LE(len, layout_.slot_size);
    const std::uint64_t m = next_;
    if (m > layout_.slots && word(consumed_at(base_)).load(std::memory_order_acquire) < m - layout_.slots)
      return false;
    const std::size_t slot = static_cast<std::size_t>((m - 1) % layout_.slots);
    std::memcpy(slot_data(base_, layout_, slot), data, len);
    std::byte* header = slot_header(base_, slot);
    const std::uint64_t len64 = len;
    std::memcpy(header + 8, &tag, 8);
    std::memcpy(header + 16, &len64, 8);
    word(header).store(m, std::memory_order_release);
    ++next_;
    return true;
  }

  bool call_may_end() override { return true; }
  status error() const override { return {}; }
  bool wind_down() override { return true; }

 private:
  std::unique_ptr<mapped_region> mailbox_;
  std::byte* base_;
  mailbox_layout layout_;
  std::uint64_t next_ = 1;
};

status record_error(const request_record& r, const char* what) {
  if (r.done && r.result != UCS_OK && r.result != UCS_ERR_CANCELED)
    return ucx_status(r.result, what);
  return {};
}

class ucx_sender final : public ring_sender {
 public:
  ucx_sender(ucp_worker_h worker, ucp_ep_h right, std::uint32_t gen) : worker_(worker), right_(right), gen_(gen) {}

  void begin_call(std::uint32_t seq) override {
    // Records of earlier calls stay until UCX returns them.
    while (!records_.empty() && records_.front().done) {
      if (auto s = record_error(records_.front(), "sending to the right neighbour"); !s.ok() && error_.ok())
        error_ = s;
      records_.pop_front();
    }
    first_send_ = records_.size();
    fin_ = &records_.emplace_back();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = &on_recv_done;
    p.user_data = fin_;
    track(*fin_, ucp_tag_recv_nbx(worker_, &fin_byte_, 1, fin_tag(seq, gen_), ~std::uint64_t{0}, &p));
    ++first_send_;
  }

  bool try_send(std::uint64_t tag, const std::byte* data, std::size_t len) override {
    auto& r = records_.emplace_back();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &on_send_done;
    p.user_data = &r;
    track(r, ucp_tag_send_nbx(right_, data, len, tag, &p));
    return true;
  }

  bool call_may_end() override {
    if (fin_->done)
      return true;
    for (std::size_t i = first_send_; i < records_.size(); ++i)
      if (!records_[i].done)
        return false;
    return true;
  }

  status error() const override {
    if (!error_.ok())
      return error_;
    for (const auto& r : records_)
      if (auto s = record_error(r, "sending to the right neighbour"); !s.ok())
        return s;
    return {};
  }

  bool wind_down() override {
    if (fin_ != nullptr && !fin_->done && fin_->request != nullptr)
      ucp_request_cancel(worker_, fin_->request);
    return std::all_of(records_.begin(), records_.end(), [](const request_record& r) { return r.done; });
  }

 private:
  ucp_worker_h worker_;
  ucp_ep_h right_;
  std::uint32_t gen_;
  std::deque<request_record> records_;
  request_record* fin_ = nullptr;
  std::size_t first_send_ = 0;
  std::uint8_t fin_byte_ = 0;
  status error_;
};

class ucx_receiver final : public ring_receiver {
 public:
  ucx_receiver(ucp_worker_h worker, ucp_ep_h left, std::size_t slot_size, std::size_t window, std::uint32_t gen)
      : worker_(worker), left_(left), slot_size_(slot_size), slots_(window * slot_size), recvs_(window), gen_(gen) {}

  void begin_call(std::uint32_t seq, std::vector<std::pair<std::uint64_t, std::size_t>> expected) override {
    while (!fins_.empty() && fins_.front().done)
      fins_.pop_front();
    seq_ = seq;
    expected_ = std::move(expected);
    index_ = 0;
    fin_sent_ = false;
    for (std::size_t i = 0; i < expected_.size() && i < recvs_.size(); ++i)
      post(i);
  }

  const std::byte* try_receive() override {
    const auto& r = recvs_[index_ % recvs_.size()];
    if (!r.done || r.result != UCS_OK)
      return nullptr;
    return slots_.data() + (index_ % recvs_.size()) * slot_size_;
  }

  void release() override {
    const std::size_t next = index_ + recvs_.size();
    ++index_;
    if (next < expected_.size())
      post(next);
  }

  bool call_may_end() override {
    if (index_ < expected_.size())
      return false;
    if (!fin_sent_) {
      auto& r = fins_.emplace_back();
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = &on_send_done;
      p.user_data = &r;
      track(r, ucp_tag_send_nbx(left_, &fin_byte_, 1, fin_tag(seq_, gen_), &p));
      fin_sent_ = true;
    }
    return true;
  }

  status error() const override {
    for (const auto& r : recvs_)
      if (auto s = record_error(r, "receiving from the left neighbour"); !s.ok())
        return s;
    for (const auto& r : fins_)
      if (auto s = record_error(r, "sending a fin to the left neighbour"); !s.ok())
        return s;
    return {};
  }

  bool wind_down() override {
    for (auto& r : recvs_)
      if (!r.done && r.request != nullptr)
        ucp_request_cancel(worker_, r.request);
    return std::all_of(recvs_.begin(), recvs_.end(), [](const request_record& r) { return r.done || r.request == nullptr; }) &&
           std::all_of(fins_.begin(), fins_.end(), [](const request_record& r) { return r.done; });
  }

 private:
  void post(std::size_t i) {
    const std::size_t slot = i % recvs_.size();
    auto& r = recvs_[slot];
    r = request_record{};
    RK_CHECK_LE(expected_[i].second, slot_size_);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = &on_recv_done;
    p.user_data = &r;
    track(r, ucp_tag_recv_nbx(worker_, slots_.data() + slot * slot_size_, expected_[i].second, expected_[i].first,
                              ~std::uint64_t{0}, &p));
  }

  ucp_worker_h worker_;
  ucp_ep_h left_;
  std::size_t slot_size_;
  std::vector<std::byte> slots_;
  std::vector<request_record> recvs_;
  std::deque<request_record> fins_;
  std::vector<std::pair<std::uint64_t, std::size_t>> expected_;
  std::size_t index_ = 0;
  std::uint32_t seq_ = 0;
  std::uint32_t gen_;
  bool fin_sent_ = false;
  std::uint8_t fin_byte_ = 1;
};

}  // namespace

expected<std::unique_ptr<shm_region>> shm_region::create(ucp_context_h context, std::size_t bytes, const std::string& what) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  std::unique_ptr<shm_region> m{new shm_region};
  m->context_ = context;
  if (auto s = ucp_mem_map(context, &params, &m->memh_); s != UCS_OK)
    return ucx_status(s, "allocating " + what + " (" + std::to_string(bytes) + " bytes)");
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  if (auto s = ucp_mem_query(m->memh_, &attr); s != UCS_OK)
    return ucx_status(s, "querying " + what);
  m->base_ = static_cast<std::byte*>(attr.address);
  m->size_ = bytes;
  // Zeroed, and every page touched now rather than on first use.
  std::memset(m->base_, 0, bytes);
  void* rkey = nullptr;
  std::size_t rkey_len = 0;
  if (auto s = ucp_rkey_pack(context, m->memh_, &rkey, &rkey_len); s != UCS_OK)
    return ucx_status(s, "packing the key of " + what);
  const auto base = reinterpret_cast<std::uint64_t>(m->base_);
  const std::uint64_t size = bytes;
  m->address_.resize(16 + rkey_len);
  std::memcpy(m->address_.data(), &base, 8);
  std::memcpy(m->address_.data() + 8, &size, 8);
  std::memcpy(m->address_.data() + 16, rkey, rkey_len);
  ucp_rkey_buffer_release(rkey);
  return m;
}

shm_region::~shm_region() {
  if (memh_ != nullptr)
    ucp_mem_unmap(context_, memh_);
}

expected<std::unique_ptr<mapped_region>> mapped_region::map(ucp_ep_h ep, std::span<const std::byte> address) {
  if (address.size() <= 16)
    return status{errc::invalid_argument, "malformed shared-memory address (" + std::to_string(address.size()) + " bytes)"};
  std::uint64_t base = 0;
  std::uint64_t size = 0;
  std::memcpy(&base, address.data(), 8);
  std::memcpy(&size, address.data() + 8, 8);
  std::unique_ptr<mapped_region> m{new mapped_region};
  if (auto s = ucp_ep_rkey_unpack(ep, address.data() + 16, &m->rkey_); s != UCS_OK) {
    m->rkey_ = nullptr;
    return status{errc::unsupported, "cannot unpack the key: " + std::string{ucs_status_string(s)}};
  }
  void* local = nullptr;
  if (auto s = ucp_rkey_ptr(m->rkey_, base, &local); s != UCS_OK)
    return status{errc::unsupported, "cannot map it here: " + std::string{ucs_status_string(s)}};
  m->base_ = static_cast<std::byte*>(local);
  m->size_ = size;
  return m;
}

mapped_region::~mapped_region() {
  if (rkey_ != nullptr)
    ucp_rkey_destroy(rkey_);
}

expected<std::unique_ptr<shm_mailbox>> shm_mailbox::create(ucp_context_h context, mailbox_layout layout) {
  std::unique_ptr<shm_mailbox> m{new shm_mailbox};
  RK_ASSIGN_OR_RETURN(m->region_, shm_region::create(context, layout.total_size(), "the ring mailbox"));
  m->layout_ = layout;
  return m;
}

std::unique_ptr<ring_receiver> make_shm_receiver(shm_mailbox& mailbox) { return std::make_unique<shm_receiver>(mailbox); }

expected<std::unique_ptr<ring_sender>> make_shm_sender(ucp_ep_h ep, std::span<const std::byte> mailbox_address,
                                                       mailbox_layout layout) {
  auto mapped = mapped_region::map(ep, mailbox_address);
  if (!mapped)
    return status{mapped.error().code(), "the right neighbour's mailbox: " + mapped.error().message()};
  if ((*mapped)->size() < layout.total_size())
    return status{errc::invalid_argument, "the right neighbour's mailbox holds " + std::to_string((*mapped)->size()) +
                                              " bytes, the layout needs " + std::to_string(layout.total_size())};
  return std::unique_ptr<ring_sender>{std::make_unique<shm_sender>(std::move(*mapped), layout)};
}

std::unique_ptr<ring_sender> make_ucx_sender(ucp_worker_h worker, ucp_ep_h right, std::uint32_t gen) {
  return std::make_unique<ucx_sender>(worker, right, gen);
}

std::unique_ptr<ring_receiver> make_ucx_receiver(ucp_worker_h worker, ucp_ep_h left, std::size_t slot_size,
                                                 std::size_t window, std::uint32_t gen) {
  return std::make_unique<ucx_receiver>(worker, left, slot_size, window, gen);
}

}  // namespace rekindle::transport::detail
