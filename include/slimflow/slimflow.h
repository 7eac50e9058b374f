/* slimflow C API: load a frozen model (.sfm) and run inference from C or any language with a C
 * foreign-function interface.
 *
 * Conventions
 *   - Functions returning int return 0 on success and -1 on failure (the counting and rank
 *     functions return a count or rank, or -1). Functions returning a pointer return NULL on
 *     failure. After a failure, sf_last_error() describes it.
 *   - No function throws or aborts on bad input; every pointer argument is checked for NULL.
 *   - Inputs and outputs are float32, dense, row-major (C order). Outputs of another element
 *     type (e.g. an i64 ArgMax) are converted to float32.
 *   - One sf_model must not be used by two threads at once; different models may run in
 *     parallel. sf_last_error() is per thread.
 *
 * Typical use:
 *   sf_model* m = sf_model_load("mnist.sfm");
 *   if (!m) { fprintf(stderr, "%s\n", sf_last_error()); return 1; }
 *   int64_t dims[8];
 *   int rank = sf_model_input_shape(m, 0, dims, 8);
 *   sf_model_set_input(m, 0, pixels, dims, rank);
 *   if (sf_model_run(m) != 0) { ... }
 *   const float* y; const int64_t* y_dims; int y_rank;
 *   sf_model_output(m, 0, &y, &y_dims, &y_rank);
 *   sf_model_free(m);
 */
#ifndef SLIMFLOW_SLIMFLOW_H_
#define SLIMFLOW_SLIMFLOW_H_

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SF_API __attribute__((visibility("default")))
#else
#define SF_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this interface; raised only when a function is added or changed. */
#define SLIMFLOW_C_API_VERSION 1

/* A loaded model with its own runtime state (plans, arena, last outputs). Opaque. */
typedef struct sf_model sf_model;

/* Loads a model file. Returns NULL on failure (the message names the path). A file that
 * `slimflow import` kept symbolic (an ONNX model with free dimensions, such as batch, height or
 * width) serves every input size: it is planned for each new input shape at sf_model_run, and
 * the plans of the last few shapes are kept. */
SF_API sf_model* sf_model_load(const char* path);

/* Frees a model and everything it owns, including output buffers. NULL is a no-op. */
SF_API void sf_model_free(sf_model* model);

/* Number of model inputs / outputs, or -1 when model is NULL. */
SF_API int sf_model_num_inputs(const sf_model* model);
SF_API int sf_model_num_outputs(const sf_model* model);

/* Name of input / output i, valid as long as the model lives; NULL when i is out of range. */
SF_API const char* sf_model_input_name(const sf_model* model, int i);
SF_API const char* sf_model_output_name(const sf_model* model, int i);

/* Writes the declared shape of input i into dims (at most max_dims entries; dims may be NULL
 * when max_dims is 0) and returns its rank, or -1 on failure; -1 in dims marks a dimension a
 * symbolic model leaves free. A rank above max_dims is not a failure: call again with a larger
 * buffer. */
SF_API int sf_model_input_shape(const sf_model* model, int i, int64_t* dims, int max_dims);

/* Copies rank dims and their product of floats from data into input i. The rank must equal the
 * declared one; dimensions may differ from the declared shape (e.g. another batch size) as long
 * as the model accepts them, which sf_model_run checks (an input that does not fit fails with a
 * message naming the input, the dimension and what the model allows). Returns 0 or -1. */
SF_API int sf_model_set_input(sf_model* model, int i, const float* data, const int64_t* dims,
                              int rank);

/* Runs the model on the inputs last set (all must have been set). Returns 0 or -1; on failure
 * no outputs are available. */
SF_API int sf_model_run(sf_model* model);

/* Points *data, *dims and *rank at output i of the last successful run. The buffers belong to
 * the model and stay valid until the next sf_model_run or sf_model_free. Returns 0 or -1. */
SF_API int sf_model_output(const sf_model* model, int i, const float** data, const int64_t** dims,
                           int* rank);

/* The message of the last failure on this thread ("" if none). Valid until the next failing
 * call on this thread. */
SF_API const char* sf_last_error(void);

/* Threads used by later sf_model_run calls (process-wide, any model); 0 restores the default
 * (OMP_NUM_THREADS, or all cores). Returns 0, or -1 when n is negative. On cores that other
 * processes share, start the host program with OMP_WAIT_POLICY=passive: OpenMP's threads
 * otherwise spin while idle and hold the cores their descheduled teammates need (the variable
 * is read when OpenMP loads, so the library cannot set it). */
SF_API int sf_set_num_threads(int n);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SLIMFLOW_SLIMFLOW_H_ */
