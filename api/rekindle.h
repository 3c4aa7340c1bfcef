/* rekindle worker API: what a training program's rank needs from rekindle, as a stable C ABI.
 *
 * A program started by rekindled as a rank of a job.command joins with rk_join, reports each
 * step (rk_step_done), snapshots its state into its node's shared memory (rk_snapshot) and
 * restores it after a failure (rk_restore_*). When another rank fails, rekindle starts a new
 * epoch: rk_step_done answers RK_RECONFIGURE (or the program's own collective fails), the
 * program calls rk_reconfigure, which waits for the new epoch and gives its rank, world and
 * bootstrap address, rebuilds its process group, restores, and goes on — its process stays.
 * See docs/WORKER_API.md.
 *
 * Every function returns RK_OK (0) or a code; rk_error gives the message of a handle's last
 * error, rk_last_error that of a failed call without a handle on this thread. A handle is used by one thread
 * at a time. Strings are UTF-8, NUL-terminated, owned by the library and valid until the next
 * call on the same handle.
 */
#ifndef REKINDLE_API_H
#define REKINDLE_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: rk_step_times. */
#define RK_API_VERSION 2
#define RK_EXPORT __attribute__((visibility("default")))

typedef enum rk_code {
  RK_OK = 0,
  /* The world changed (a rank failed, a node was lost): call rk_reconfigure. */
  RK_RECONFIGURE = 1,
  /* The job ended (completed, stopped or failed elsewhere): leave the training loop. */
  RK_FINISHED = 2,
  /* Not started by rekindled (no REKINDLE_AGENT in the environment). */
  RK_ERR_NOT_UNDER_REKINDLE = -1,
  /* A bad argument: a null pointer, an empty or repeated buffer name, an unknown name. */
  RK_ERR_INVALID = -2,
  /* Called out of order: restore twice in an epoch, snapshot before restore, after finish. */
  RK_ERR_ORDER = -3,
  /* The snapshot is larger than the slot (job.state_bytes). */
  RK_ERR_TOO_LARGE = -4,
  /* No answer in time (rk_reconfigure's timeout, a state that did not arrive). */
  RK_ERR_TIMEOUT = -5,
  /* A state could not be read intact (every copy damaged or gone). */
  RK_ERR_DATA_LOSS = -6,
  /* Anything else: the message says what. */
  RK_ERR_INTERNAL = -7
} rk_code;

typedef struct rk_rank rk_rank;

/* Where the rank stands in its current epoch. */
typedef struct rk_info {
  uint32_t rank;
  uint32_t world_size;
  uint32_t local_rank;
  uint32_t local_world_size;
  uint64_t epoch;
  /* The step to resume from (0: from the start) and the world size that took its snapshots. */
  uint64_t restore_step;
  uint32_t restore_world;
  /* The process group's bootstrap address for this epoch (MASTER_ADDR, MASTER_PORT). */
  char master_addr[256];
  uint16_t master_port;
  /* The job's checkpoint.snapshot_every and the slot's capacity (job.state_bytes). */
  uint64_t snapshot_every;
  uint64_t state_bytes;
  /* timeouts.collective in milliseconds: what a process group's operations should wait. */
  uint64_t collective_timeout_ms;
  /* timeouts.rendezvous in milliseconds: how long ranks of a new epoch may take to meet (a
   * restarted rank's program starts its interpreter meanwhile). */
  uint64_t rendezvous_timeout_ms;
} rk_info;

/* One named buffer of the state. */
typedef struct rk_buffer {
  const char* name;
  const void* data;
  uint64_t size;
} rk_buffer;

/* Joins the job as the rank rekindled started this process for, and waits until its first
 * epoch starts. */
RK_EXPORT int rk_join(rk_rank** out);
/* The message of the last call without a handle (rk_join, rk_shard_open) that failed on this
 * thread. */
RK_EXPORT const char* rk_last_error(void);
RK_EXPORT int rk_info_get(const rk_rank* rk, rk_info* out);

/* Writes `count` buffers as the snapshot of `step` into this rank's slot in one pass (copied and
 * checksummed together); the node replicates and persists it. A snapshot the slot's custody rule
 * skips (it would overwrite the step being restored) returns RK_OK and writes nothing. */
RK_EXPORT int rk_snapshot(rk_rank* rk, uint64_t step, const rk_buffer* buffers, size_t count);

/* Reads the state of this epoch's restore step from wherever the supervisor says it is (this
 * node's memory, a buddy's, disk). `parts` is 1 when the world stayed (this rank's own state)
 * and the old world's size when it changed (every old rank's state, part i of old rank i). Once
 * per epoch; RK_ERR_ORDER when the restore step is 0. */
RK_EXPORT int rk_restore_begin(rk_rank* rk, uint64_t* step, uint32_t* parts);
/* The number of buffers of part `part`, and buffer `index` of it. */
RK_EXPORT int rk_restore_count(rk_rank* rk, uint32_t part, size_t* count);
RK_EXPORT int rk_restore_entry(rk_rank* rk, uint32_t part, size_t index, const char** name, uint64_t* size);
/* Copies buffer `name` of part `part` into `dst` (exactly its size). */
RK_EXPORT int rk_restore_copy(rk_rank* rk, uint32_t part, const char* name, void* dst, uint64_t size);
/* Ends the restore: checks that no byte changed while it was read and tells the supervisor. */
RK_EXPORT int rk_restore_end(rk_rank* rk);

/* Reports a finished step: its number, loss and tokens. RK_RECONFIGURE when the epoch changed,
 * RK_FINISHED when the job ended. */
RK_EXPORT int rk_step_done(rk_rank* rk, uint64_t step, double loss, uint64_t tokens);
/* How the time of the step that rk_step_done reports next divides, in nanoseconds: forward and
 * backward passes, collectives, loading its batch; RK_STEP_TIME_UNKNOWN for a part the program
 * does not measure. Compute not given is the step's time less the parts given; stragglers are
 * scored on it (docs/RUNTIME.md). RK_ERR_INVALID for a part over an hour. */
#define RK_STEP_TIME_UNKNOWN UINT64_MAX
RK_EXPORT int rk_step_times(rk_rank* rk, uint64_t compute_ns, uint64_t communication_ns, uint64_t data_ns);
/* Whether the epoch changed, without reporting: RK_OK, RK_RECONFIGURE or RK_FINISHED. */
RK_EXPORT int rk_poll(rk_rank* rk);
/* Waits up to `timeout_ms` for the next epoch (after RK_RECONFIGURE, or when the program's own
 * collective failed): RK_OK with the new rk_info, RK_FINISHED, or RK_ERR_TIMEOUT when no new
 * epoch came (the failure was not another rank's). */
RK_EXPORT int rk_reconfigure(rk_rank* rk, uint64_t timeout_ms);

/* Leaves the job and frees the handle (the process should exit with status 0 when its training is
 * complete). */
RK_EXPORT int rk_finish(rk_rank* rk);
RK_EXPORT const char* rk_error(const rk_rank* rk);

/* A checkpoint shard on disk, read outside a job (rekindle checkpoint export): the shard file of
 * rank `rank` at step `step`, its header and checksum verified, its named buffers listed. */
typedef struct rk_shard rk_shard;
RK_EXPORT int rk_shard_open(const char* path, uint64_t step, uint32_t rank, rk_shard** out);
RK_EXPORT int rk_shard_count(rk_shard* shard, size_t* count);
RK_EXPORT int rk_shard_entry(rk_shard* shard, size_t index, const char** name, uint64_t* size);
RK_EXPORT int rk_shard_copy(rk_shard* shard, const char* name, void* dst, uint64_t size);
RK_EXPORT const char* rk_shard_error(const rk_shard* shard);
RK_EXPORT int rk_shard_close(rk_shard* shard);

#ifdef __cplusplus
}
#endif

#endif
