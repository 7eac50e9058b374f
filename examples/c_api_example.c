/* Runs a slimflow model from plain C: loads the model named on the command line, feeds zeros of
 * each input's declared shape, runs it and prints every output with its argmax.
 *
 *   c_api_example model.sfm
 */
#include <stdio.h>
#include <stdlib.h>

#include "slimflow/slimflow.h"

enum { kMaxRank = 16 };

static int fail(sf_model* model, const char* what) {
  fprintf(stderr, "c_api_example: %s: %s\n", what, sf_last_error());
  sf_model_free(model);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.sfm\n", argv[0]);
    return 2;
  }
  sf_model* model = sf_model_load(argv[1]);
  if (model == NULL) return fail(NULL, "cannot load the model");

  for (int i = 0; i < sf_model_num_inputs(model); ++i) {
    int64_t dims[kMaxRank];
    int rank = sf_model_input_shape(model, i, dims, kMaxRank);
    if (rank < 0) return fail(model, "cannot read an input shape");
    if (rank > kMaxRank) {
      fprintf(stderr, "c_api_example: input %d has rank %d, over %d\n", i, rank, kMaxRank);
      sf_model_free(model);
      return 1;
    }
    size_t count = 1;
    for (int k = 0; k < rank; ++k) count *= (size_t)dims[k];
    /* calloc: zero bits are 0.0f in IEEE 754. */
    float* zeros = calloc(count > 0 ? count : 1, sizeof(float));
    if (zeros == NULL) {
      fprintf(stderr, "c_api_example: out of memory\n");
      sf_model_free(model);
      return 1;
    }
    int status = sf_model_set_input(model, i, zeros, dims, rank);
    free(zeros);
    if (status != 0) return fail(model, "cannot set an input");
    printf("input '%s' rank %d: zeros\n", sf_model_input_name(model, i), rank);
  }

  if (sf_model_run(model) != 0) return fail(model, "run failed");

  for (int i = 0; i < sf_model_num_outputs(model); ++i) {
    const float* data = NULL;
    const int64_t* dims = NULL;
    int rank = 0;
    if (sf_model_output(model, i, &data, &dims, &rank) != 0) return fail(model, "no output");
    int64_t count = 1;
    for (int k = 0; k < rank; ++k) count *= dims[k];
    int64_t best = count > 0 ? 0 : -1;
    for (int64_t k = 1; k < count; ++k)
      if (data[k] > data[best]) best = k;
    printf("output '%s' [", sf_model_output_name(model, i));
    for (int k = 0; k < rank; ++k) printf(k > 0 ? ",%lld" : "%lld", (long long)dims[k]);
    printf("]: argmax %lld, values", (long long)best);
    for (int64_t k = 0; k < count; ++k) printf(" %.6g", data[k]);
    printf("\n");
  }
  sf_model_free(model);
  return 0;
}
