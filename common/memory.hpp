#pragma once

namespace rekindle {

/// Keeps large freed blocks inside the process instead of returning them to the kernel.
///
/// By default glibc maps every allocation above 128 KiB on its own and unmaps it when freed, so a
/// buffer of a snapshot's size (a replica, a restore, a shard read) costs a page fault per 4 KiB
/// each time, and on virtual machines that report freed pages to the host, every large free also
/// slows the whole guest for tens of milliseconds (measured: the next 98 MB memcpy of unrelated
/// memory took 32-68 ms instead of 6 ms). Call first thing in main: blocks up to 1 GiB come from
/// the heap and freed memory stays there for the next one.
void keep_large_frees_in_process() noexcept;

}  // namespace rekindle
