// What --augment costs the data pipeline: BatchIterator::next over MNIST-sized images with no
// augmentation, shift:2 and shift:2,flip (items/s = images/s), from bytes as IDX files load, and
// from floats without augmentation (what a byte's division by 255 adds). bench/distill.py compares
// the difference with a whole training step's time per image.
#include <benchmark/benchmark.h>

#include <algorithm>

#include "io/dataset.h"

namespace {

sf::Dataset synthetic(int64_t n, sf::DType dtype) {
  sf::Dataset d;
  d.name = "synthetic";
  d.images = sf::Tensor(dtype, {n, 28, 28, 1});
  d.labels = sf::Tensor(sf::DType::i32, {n});
  for (int64_t i = 0; i < d.images.numel(); ++i) {
    const auto pixel = static_cast<uint8_t>(i % 255);
    if (dtype == sf::DType::u8)
      d.images.data<uint8_t>()[i] = pixel;
    else
      d.images.data<float>()[i] = pixel / 255.0f;
  }
  std::fill(d.labels.data<int32_t>(), d.labels.data<int32_t>() + n, 0);
  return d;
}

void batches(benchmark::State& state, const char* augment, sf::DType dtype) {
  const sf::Dataset data = synthetic(6400, dtype);
  sf::BatchIterator it(data, sf::BatchOptions{.batch_size = 64,
                                              .seed = 1,
                                              .shuffle = true,
                                              .augment = sf::parse_augmentation(augment)});
  sf::Tensor images, labels;
  int64_t count = 0;
  for (auto _ : state) {
    if (!it.next(images, labels)) it.next(images, labels);
    benchmark::DoNotOptimize(images.data<float>());
    count += labels.numel();
  }
  state.SetItemsProcessed(count);
}

BENCHMARK_CAPTURE(batches, none, "none", sf::DType::u8);
BENCHMARK_CAPTURE(batches, shift2, "shift:2", sf::DType::u8);
BENCHMARK_CAPTURE(batches, shift2_flip, "shift:2,flip", sf::DType::u8);
BENCHMARK_CAPTURE(batches, none_from_floats, "none", sf::DType::f32);

}  // namespace
