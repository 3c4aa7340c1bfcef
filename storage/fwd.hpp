#pragma once

// Forward declarations of storage/.
namespace rekindle::storage {
class state_store;
struct state_store_options;
struct job_record;
struct membership;
struct rank_member;
struct rank_record;
struct checkpoint_manifest;
struct shard_entry;
struct event;
class snapshot_slot;
struct snapshot_view;
struct shard_info;
class shard_file_hooks;
}  // namespace rekindle::storage
