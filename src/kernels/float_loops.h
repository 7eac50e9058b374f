// The hot loops of the float kernels a training step runs besides oneDNN's products: max pooling
// and its gradient, the filter gradient of single-channel convs, BiasAdd, AddN, BiasAddGrad,
// BatchNorm and its gradient, and Dropout. They give the reference kernels' results (the same
// elements chosen, sums reassociated only), vectorized with AVX-512 where the CPU has it (chosen at
// run time: the build targets baseline x86-64; float_loops_avx512.h), in portable C++ elsewhere.
#pragma once

#include <cstdint>

#include "core/activation.h"
#include "ops/conv_geometry.h"

namespace sf {

// MaxPool of NHWC x [n, g.h.in, g.w.in, channels] into y [n, g.h.out, g.w.out, channels]: the
// maximum of each window's in-bounds values (NaN skipped), -inf for a window wholly in padding.
void max_pool_f32(const float* x, int64_t n, int64_t channels, const Window2D& g, float* y);

// MaxPoolGrad: dx zero but where each window's first maximum, the first tap in row-major window
// order whose x equals y, receives the window's dy (summed where windows overlap); with relu
// only windows whose maximum is positive do. x is what the forward pass pooled, so nothing is
// recomputed.
void max_pool_grad_f32(const float* x, const float* y, const float* dy, int64_t n,
                       int64_t channels, const Window2D& g, bool relu, float* dx);

// MaxPoolWindowArgmax: y as max_pool_f32, and argmax [n, g.h.out, g.w.out, channels] the
// row-major position in its whole window (padding counted) of each window's first maximum;
// kNoWindowArgmax (ops/conv_geometry.h) where the window holds no value, or with relu where its
// maximum is not positive.
void max_pool_window_argmax_f32(const float* x, int64_t n, int64_t channels, const Window2D& g,
                                bool relu, float* y, uint8_t* argmax);

// MaxPoolGradWindowArgmax where the windows tile the image (windows_tile on both axes): each
// window's dy at the position its argmax names in dx [n, g.h.in, g.w.in, channels], 0 at the
// window's other positions. Neither x nor y is read: the forward pass said where the maxima are.
void max_pool_grad_window_argmax_f32(const float* dy, const uint8_t* argmax, int64_t n,
                                     int64_t channels, const Window2D& g, float* dx);

// Conv2DBackpropFilter of a single-channel image (x [n, g.h.in, g.w.in, 1], groups 1), which
// oneDNN runs at a few percent of its speed elsewhere: df [g.h.k, g.w.k, 1, outputs] is the sum
// over images and output pixels of x at each tap times dy [n, g.h.out, g.w.out, outputs]. Each
// image sums in float, images add up in double.
void conv_filter_grad_single_channel_f32(const float* x, const float* dy, int64_t n,
                                         int64_t outputs, const Window2D& g, float* df);

// The forward pass of the same convs: y [n, g.h.out, g.w.out, outputs] = bias + the sum over
// taps of x [n, g.h.in, g.w.in] (zero outside) times w [taps, outputs], then the activation,
// summed in float in tap order.
void conv_single_channel_f32(const float* x, const float* w, const float* bias, int64_t n,
                             int64_t outputs, const Window2D& g, Activation activation, float* y);

// conv_single_channel_f32 and then max_pool_window_argmax_f32 (window `pool`, relu as there) of
// its output, image by image: the conv's output of one image stays in the cache between them
// and never reaches memory. y and argmax are the pool's outputs.
void conv_single_channel_max_pool_f32(const float* x, const float* w, const float* bias, int64_t n,
                                      int64_t outputs, const Window2D& conv, Activation activation,
                                      const Window2D& pool, bool relu, float* y, uint8_t* argmax);

// The filter and bias gradients of conv_single_channel_max_pool_f32, from x, the gradient dy of
// its pooled output and its argmax (the windows tile the conv's output): df as
// conv_filter_grad_single_channel_f32 and db [outputs] as bias_add_grad_images_f32 sums the
// conv output's gradient, which max_pool_grad_window_argmax_f32 would write: bit for bit the
// three kernels' results, with that gradient written image by image into the cache only.
void conv_single_channel_max_pool_grads_f32(const float* x, const float* dy, const uint8_t* argmax,
                                            int64_t n, int64_t outputs, const Window2D& conv,
                                            const Window2D& pool, float* df, float* db);

// y[r, j] = x[r, j] + bias[j] for rows x channels; with relu, that sum where positive, else 0.
// A bool, not an Activation: BiasAddRelu's relu maps NaN to 0 (its reference kernel does), where
// activated() keeps NaN.
void bias_add_f32(const float* x, const float* bias, int64_t rows, int64_t channels, bool relu,
                  float* y);

// y[i] = the sum of xs[k][i] over k < count, summed in double in input order and rounded once,
// then the activation: the reference's sums, sixteen to an AVX-512 vector where the CPU has it,
// elsewhere in blocks of elements the compiler vectorizes.
void add_n_f32(const float* const* xs, int64_t count, int64_t n, Activation activation, float* y);

// db[j] = sum over rows of dy[r, j]: float partial sums over blocks of rows, totals in double.
void bias_add_grad_f32(const float* dy, int64_t rows, int64_t channels, float* db);

// The same for dy [n, image_rows, channels] (a conv's gradient), image by image: each image's
// rows in blocks as above, the images' sums added in image order, so a kernel that holds one
// image of dy at a time (conv_single_channel_max_pool_grads_f32) gets the same bits.
void bias_add_grad_images_f32(const float* dy, int64_t n, int64_t image_rows, int64_t channels,
                              float* db);

// BatchNorm over the last axis of x [rows, channels]: y = (x - mean) * gamma / sqrt(var +
// epsilon) + beta, then the activation as the Relu or Relu6 op gives it (activation_op_value).
// With batch_statistics (training) mean and var are written: each channel's mean and population
// variance over the rows, the variance from squared deviations in a second pass, summed as
// bias_add_grad_f32 sums; without, they are read.
void batch_norm_f32(const float* x, const float* gamma, const float* beta, int64_t rows,
                    int64_t channels, double epsilon, bool batch_statistics, Activation activation,
                    float* mean, float* var, float* y);

// BatchNormGrad: dgamma = the sum of dy * xhat, dbeta = the sum of dy over rows (xhat the
// normalized x), and dx, which with batch_statistics also carries the statistics' dependence on
// x. The same sums as batch_norm_f32's. With `gate`, dy is the gate's activation gradient of the
// given dy (FusedBatchNormGrad), never written out.
void batch_norm_grad_f32(const float* dy, ActivationGrad gate, const float* x, const float* gamma,
                         const float* mean, const float* var, int64_t rows, int64_t channels,
                         double epsilon, bool batch_statistics, float* dx, float* dgamma,
                         float* dbeta);

// Dropout in training: mask[i] = 0 where dropout_bits(key, i) < threshold (kernels/
// dropout_draw.h), else keep; y[i] = x[i] * mask[i]. The reference kernel's masks, bit for bit.
void dropout_f32(const float* x, int64_t n, uint64_t key, uint32_t threshold, float keep, float* y,
                 float* mask);

}  // namespace sf
