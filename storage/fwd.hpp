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
struct store_contents;
struct restart_counts;
class snapshot_slot;
struct snapshot_view;
struct snapshot_info;
struct shard_info;
struct shard_expectation;
struct shard_write_options;
class shard_file_hooks;
}  // namespace rekindle::storage
