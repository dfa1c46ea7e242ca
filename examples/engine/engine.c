/*===- engine.c - An example host engine over the dhs C API (C99) ----------===
 *
 * dhs-engine STEP_DIR... [--backend cpu|cuda|auto] [--steps N] [--timed-steps N]
 *
 * Drives the runtime the way a serving engine would: a model of 4 layers in
 * layer groups of 2, five requests admitted with 1500-row prefills (a sixth
 * and seventh show admission refusal), decode steps over batches of up to B
 * requests with recency-biased selections and random queries, one appended
 * token per request per step, statistics every few steps, a rejected step
 * (a row id outside a history), and the requests finished at the end. KV
 * rows and queries are synthetic. Exit status 0 when everything behaved.
 *
 * Several STEP_DIRs are a layer group's steps, one per layer index of its
 * pool (dhs_runtime_load_steps). On a CUDA backend a second session without
 * invariant checks times --timed-steps steps launched, then replayed as a
 * CUDA graph, and prints the median step time of each (0: no timing).
 *
 *===----------------------------------------------------------------------===*/

#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include "runtime/capi/dhs_runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAYERS 4
#define LAYERS_PER_GROUP 2
#define REQUESTS 5
#define PREFILL 1500
#define MAX_CONTEXT 4096

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* xorshift64*: deterministic pseudo-random numbers. */
static uint64_t next_random(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

/* Random bf16 values in +-[0.125, 2), never zero. */
static void fill_bf16(uint16_t *data, size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) {
    uint64_t bits = next_random();
    uint16_t sign = (uint16_t)(bits & 0x8000u);
    uint16_t exponent = (uint16_t)(124 + ((bits >> 20) & 3));
    data[i] = (uint16_t)(sign | (exponent << 7) | ((bits >> 40) & 0x7Fu));
  }
}

/* Prints the failure and returns 1 unless status is DHS_OK. */
static int failed(dhs_status status, const char *what) {
  if (status == DHS_OK)
    return 0;
  fprintf(stderr, "dhs-engine: %s failed: %s: %s\n", what, dhs_status_name(status),
          dhs_last_error());
  return 1;
}

/* Seconds on the monotonic clock. */
static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Selections [groups][batch][Q][K]: half among the 512 newest rows, half
 * anywhere in each lane's history. */
static void fill_selections(int32_t *rows, const dhs_step_shape *shape, int64_t batch,
                            const int64_t *lane_lengths) {
  int64_t g, b;
  size_t k, per_lane = (size_t)(shape->queries * shape->topk);
  for (g = 0; g < shape->groups; ++g)
    for (b = 0; b < batch; ++b)
      for (k = 0; k < per_lane; ++k) {
        int64_t len = lane_lengths[b];
        int64_t r = (next_random() & 1) ? len - 1 - (int64_t)(next_random() % 512)
                                        : (int64_t)(next_random() % (uint64_t)len);
        rows[(g * batch + b) * (int64_t)per_lane + (int64_t)k] = (int32_t)(r < 0 ? 0 : r);
      }
}

/* Median wall time of `count` steps (ms) of a fresh session without checks,
 * launched or as CUDA graphs; -1 on failure. */
static double time_steps(const dhs_runtime_config *base, const char *const *step_dirs,
                         size_t step_count, int count, int graphs, uint64_t *replays) {
  dhs_runtime_config config = *base;
  dhs_runtime *rt = NULL;
  dhs_step_shape shape;
  dhs_stats stats;
  double *times = NULL, median = -1.0;
  int32_t *rows = NULL;
  uint16_t *prefill = NULL, *queries = NULL, *output = NULL;
  uint64_t ids[REQUESTS];
  int64_t lengths[REQUESTS];
  int64_t batch;
  int i;
  config.check_invariants = 0;
  if (failed(dhs_runtime_create(&config, &rt), "dhs_runtime_create (timing)"))
    return -1.0;
  if (failed(dhs_runtime_load_steps(rt, step_dirs, step_count), "dhs_runtime_load_steps") ||
      failed(dhs_runtime_get_shape(rt, &shape), "dhs_runtime_get_shape") ||
      failed(dhs_runtime_set_cuda_graphs(rt, graphs), "dhs_runtime_set_cuda_graphs"))
    goto done;
  batch = shape.batch < REQUESTS ? shape.batch : REQUESTS;
  prefill = malloc((size_t)LAYERS * PREFILL * (size_t)shape.row_bytes);
  rows = malloc(sizeof(int32_t) * (size_t)(shape.groups * batch * shape.queries * shape.topk));
  queries = malloc(sizeof(uint16_t) *
                   (size_t)(LAYERS * batch * shape.queries * shape.heads * shape.qk_dim));
  output = malloc(sizeof(uint16_t) *
                  (size_t)(LAYERS * batch * shape.queries * shape.heads * shape.v_dim));
  times = malloc(sizeof(double) * (size_t)count);
  if (!prefill || !rows || !queries || !output || !times)
    goto done;
  for (i = 0; i < REQUESTS; ++i) {
    ids[i] = 3000 + (uint64_t)i;
    lengths[i] = PREFILL;
    fill_bf16(prefill, (size_t)LAYERS * PREFILL * (size_t)shape.row_bytes / 2);
    if (failed(dhs_request_admit(rt, ids[i], PREFILL, MAX_CONTEXT, prefill), "dhs_request_admit"))
      goto done;
  }
  fill_selections(rows, &shape, batch, lengths);
  fill_bf16(queries, (size_t)(LAYERS * batch * shape.queries * shape.heads * shape.qk_dim));
  for (i = -3; i < count; ++i) { /* three untimed warm-up steps */
    double start = now_seconds();
    if (failed(dhs_step_run(rt, ids, batch, rows, queries, output, DHS_MEMORY_HOST),
               "dhs_step_run (timing)"))
      goto done;
    if (i >= 0)
      times[i] = 1e3 * (now_seconds() - start);
  }
  if (failed(dhs_runtime_get_stats(rt, &stats), "dhs_runtime_get_stats"))
    goto done;
  *replays = stats.graph_replays;
  qsort(times, (size_t)count, sizeof(double), compare_doubles);
  median = count % 2 ? times[count / 2] : 0.5 * (times[count / 2 - 1] + times[count / 2]);
done:
  dhs_runtime_destroy(rt);
  free(times);
  free(rows);
  free(prefill);
  free(queries);
  free(output);
  return median;
}

static void print_stats(dhs_runtime *rt, int step) {
  dhs_stats s;
  if (failed(dhs_runtime_get_stats(rt, &s), "dhs_runtime_get_stats"))
    return;
  printf("%5d %5d %9lld %9lld %7.2f%% %9.1f %9.1f %9lld\n", step, s.admitted_requests,
         (long long)s.total_selected, (long long)s.total_fetched,
         s.total_selected ? 100.0 * (double)s.total_fetched / (double)s.total_selected : 0.0,
         (double)s.hbm_bytes_used / 1048576.0, (double)s.host_bytes_used / 1048576.0,
         (long long)s.optional_budget_slots);
}

int main(int argc, char **argv) {
  const char *step_dirs[16];
  size_t step_count = 0;
  int backend = DHS_BACKEND_CPU, steps = 40, timed_steps = 50, i, step, errors = 0;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      const char *b = argv[++i];
      backend = strcmp(b, "cuda") == 0   ? DHS_BACKEND_CUDA
                : strcmp(b, "auto") == 0 ? DHS_BACKEND_AUTO
                                         : DHS_BACKEND_CPU;
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--timed-steps") == 0 && i + 1 < argc) {
      timed_steps = atoi(argv[++i]);
    } else if (argv[i][0] != '-' && step_count < sizeof step_dirs / sizeof step_dirs[0]) {
      step_dirs[step_count++] = argv[i];
    } else {
      fprintf(stderr, "usage: dhs-engine STEP_DIR... [--backend cpu|cuda|auto] [--steps N] "
                      "[--timed-steps N]\n");
      return 2;
    }
  }
  if (step_count == 0 || timed_steps < 0) {
    fprintf(stderr, "usage: dhs-engine STEP_DIR... [--backend cpu|cuda|auto] [--steps N] "
                    "[--timed-steps N]\n");
    return 2;
  }

  dhs_runtime_config config;
  dhs_runtime_config_init(&config);
  config.layers = LAYERS;
  config.layers_per_group = LAYERS_PER_GROUP;
  config.host_rows = (int64_t)(REQUESTS + 2) * MAX_CONTEXT;
  config.newest_window = 64;
  config.draft_window = 8;
  config.hot_floor = 256;
  config.backend = backend;
  config.check_invariants = 1;
  dhs_runtime *rt = NULL;
  if (failed(dhs_runtime_create(&config, &rt), "dhs_runtime_create"))
    return 1;
  if (failed(dhs_runtime_load_steps(rt, step_dirs, step_count), "dhs_runtime_load_steps")) {
    dhs_runtime_destroy(rt);
    return 1;
  }
  dhs_step_shape shape;
  char backend_text[256];
  if (failed(dhs_runtime_get_shape(rt, &shape), "dhs_runtime_get_shape") ||
      failed(dhs_runtime_describe(rt, backend_text, sizeof backend_text), "dhs_runtime_describe")) {
    dhs_runtime_destroy(rt);
    return 1;
  }
  printf("dhs-engine: %s; step B=%lld Q=%lld H=%lld K=%lld, %lld-byte rows, %d layers in %d "
         "groups, %d HBM slots per layer\n",
         backend_text, (long long)shape.batch, (long long)shape.queries, (long long)shape.heads,
         (long long)shape.topk, (long long)shape.row_bytes, shape.layers, shape.groups,
         shape.hbm_slots);

  /* Admission: prefill rows [layers][PREFILL][row_bytes]. */
  size_t row_bytes = (size_t)shape.row_bytes;
  uint16_t *prefill = malloc((size_t)LAYERS * PREFILL * row_bytes);
  uint16_t *token = malloc((size_t)LAYERS * row_bytes);
  int64_t lengths[REQUESTS];
  uint64_t ids[REQUESTS];
  if (!prefill || !token)
    return 1;
  for (i = 0; i < REQUESTS; ++i) {
    ids[i] = 1000 + (uint64_t)i;
    lengths[i] = PREFILL;
    fill_bf16(prefill, (size_t)LAYERS * PREFILL * row_bytes / 2);
    errors +=
        failed(dhs_request_admit(rt, ids[i], PREFILL, MAX_CONTEXT, prefill), "dhs_request_admit");
  }
  /* More requests than the protected sets allow are refused cleanly. */
  {
    dhs_status s1 = dhs_request_admit(rt, 2000, 0, MAX_CONTEXT, NULL);
    dhs_status s2 = dhs_request_admit(rt, 2001, 0, MAX_CONTEXT, NULL);
    printf("admitting two more: %s, %s%s%s\n", dhs_status_name(s1), dhs_status_name(s2),
           s2 != DHS_OK ? " -- " : "", s2 != DHS_OK ? dhs_last_error() : "");
    if (s1 == DHS_OK)
      errors += failed(dhs_request_finish(rt, 2000), "dhs_request_finish");
    if (s2 == DHS_OK)
      errors += failed(dhs_request_finish(rt, 2001), "dhs_request_finish");
  }

  /* Decode steps. */
  int64_t batch_max = shape.batch < REQUESTS ? shape.batch : REQUESTS;
  size_t per_lane = (size_t)(shape.queries * shape.topk);
  size_t q_per_layer = (size_t)(batch_max * shape.queries * shape.heads * shape.qk_dim);
  size_t o_per_layer = (size_t)(batch_max * shape.queries * shape.heads * shape.v_dim);
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)shape.groups * (size_t)batch_max * per_lane);
  uint16_t *queries = malloc(sizeof(uint16_t) * LAYERS * q_per_layer);
  uint16_t *output = malloc(sizeof(uint16_t) * LAYERS * o_per_layer);
  if (!rows || !queries || !output)
    return 1;
  printf("\n%5s %5s %9s %9s %8s %9s %9s %9s\n", "step", "reqs", "selected", "fetched", "fetch%",
         "HBM MiB", "host MiB", "budget");
  for (step = 0; step < steps; ++step) {
    uint64_t batch[16];
    int lane[16];
    int64_t b;
    size_t k;
    for (b = 0; b < batch_max; ++b) {
      lane[b] = (int)((step * batch_max + b) % REQUESTS);
      batch[b] = ids[lane[b]];
    }
    int64_t lane_lengths[16];
    for (b = 0; b < batch_max; ++b)
      lane_lengths[b] = lengths[lane[b]];
    fill_selections(rows, &shape, batch_max, lane_lengths);
    fill_bf16(queries, LAYERS * q_per_layer);
    if (failed(dhs_step_run(rt, batch, batch_max, rows, queries, output, DHS_MEMORY_HOST),
               "dhs_step_run")) {
      ++errors;
      break;
    }
    for (k = 0; k < LAYERS * o_per_layer; ++k)
      if ((output[k] & 0x7F80u) == 0x7F80u) {
        fprintf(stderr, "dhs-engine: a non-finite output at %zu\n", k);
        ++errors;
        break;
      }
    for (b = 0; b < batch_max; ++b) {
      fill_bf16(token, LAYERS * row_bytes / 2);
      errors += failed(dhs_request_append(rt, batch[b], token), "dhs_request_append");
      ++lengths[lane[b]];
    }
    if (step % 10 == 0 || step + 1 == steps)
      print_stats(rt, step);
  }

  /* A bad step is rejected and changes nothing. */
  rows[0] = (int32_t)lengths[0] + 5;
  {
    uint64_t first = ids[0];
    dhs_status s = dhs_step_run(rt, &first, 1, rows, queries, output, DHS_MEMORY_HOST);
    printf("\na step selecting row %d of request %llu: %s -- %s\n", rows[0],
           (unsigned long long)first, dhs_status_name(s), dhs_last_error());
    if (s != DHS_ERROR_OUT_OF_RANGE)
      ++errors;
  }
  errors += failed(dhs_runtime_check(rt), "dhs_runtime_check");
  for (i = 0; i < REQUESTS; ++i)
    errors += failed(dhs_request_finish(rt, ids[i]), "dhs_request_finish");
  print_stats(rt, steps);
  dhs_runtime_destroy(rt);

  /* Step time with and without CUDA graphs (CUDA only). */
  if (timed_steps > 0 && strncmp(backend_text, "cuda", 4) == 0) {
    uint64_t replays_off = 0, replays_on = 0;
    double off = time_steps(&config, step_dirs, step_count, timed_steps, 0, &replays_off);
    double on = time_steps(&config, step_dirs, step_count, timed_steps, 1, &replays_on);
    if (off < 0.0 || on < 0.0 || replays_on != (uint64_t)timed_steps + 2) {
      fprintf(stderr, "dhs-engine: timing failed (%llu graph replays)\n",
              (unsigned long long)replays_on);
      ++errors;
    } else {
      printf("step time, median of %d (B=%lld, %d layers, no checks): %.3f ms launched, "
             "%.3f ms as a CUDA graph (%.2fx)\n",
             timed_steps, (long long)(shape.batch < REQUESTS ? shape.batch : REQUESTS), LAYERS, off,
             on, on > 0.0 ? off / on : 0.0);
    }
  } else if (timed_steps > 0) {
    uint64_t replays = 0;
    double off = time_steps(&config, step_dirs, step_count, timed_steps, 0, &replays);
    if (off < 0.0)
      ++errors;
    else
      printf("step time, median of %d (no checks): %.3f ms (%s backend: no CUDA graphs)\n",
             timed_steps, off, backend_text);
  }
  free(prefill);
  free(token);
  free(rows);
  free(queries);
  free(output);
  printf("dhs-engine: %s\n", errors ? "FAILED" : "ok");
  return errors ? 1 : 0;
}
