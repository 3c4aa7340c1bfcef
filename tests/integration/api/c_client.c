/* The worker API from C: the header compiles as C, librekindle.so links, and misuse outside a
 * job gets codes and messages, not a crash or a hang. Exit status 0 when every check holds. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/rekindle.h"

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  unsetenv("REKINDLE_AGENT");
  rk_rank* rk = NULL;
  expect(rk_join(&rk) == RK_ERR_NOT_UNDER_REKINDLE, "rk_join outside rekindled returns RK_ERR_NOT_UNDER_REKINDLE");
  expect(rk == NULL, "rk_join leaves no handle on failure");
  expect(strstr(rk_last_error(), "not started by rekindled") != NULL, "rk_last_error says why");
  expect(rk_join(NULL) == RK_ERR_INVALID, "rk_join(NULL) is refused");

  setenv("REKINDLE_AGENT", "127.0.0.1:1", 1);
  unsetenv("REKINDLE_CONFIG");
  expect(rk_join(&rk) == RK_ERR_NOT_UNDER_REKINDLE, "an incomplete environment is refused");
  expect(strstr(rk_last_error(), "REKINDLE_CONFIG") != NULL, "naming what is missing");

  rk_shard* shard = NULL;
  expect(rk_shard_open("/nonexistent/ckpt-00000001-r0000.shard", 1, 0, &shard) < 0, "a missing shard is refused");
  expect(shard == NULL && rk_last_error()[0] != '\0', "with a message");
  expect(rk_shard_open(NULL, 1, 0, &shard) == RK_ERR_INVALID, "a null path is refused");

  expect(rk_step_done(NULL, 1, 0.0, 0) == RK_ERR_INVALID, "a null handle is refused");
  expect(rk_step_times(NULL, 1, RK_STEP_TIME_UNKNOWN, 0) == RK_ERR_INVALID, "a null handle is refused by rk_step_times");
  expect(rk_snapshot(NULL, 1, NULL, 0) == RK_ERR_INVALID, "a null handle is refused by rk_snapshot");
  expect(rk_finish(NULL) == RK_ERR_INVALID, "rk_finish(NULL) is refused");
  expect(strcmp(rk_error(NULL), "no handle") == 0, "rk_error(NULL) answers");
  if (failures == 0)
    printf("c_client: every check holds (API version %d)\n", RK_API_VERSION);
  return failures == 0 ? 0 : 1;
}
