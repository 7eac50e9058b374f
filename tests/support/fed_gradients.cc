#include "support/fed_gradients.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace sf::testing {

Feeds feeds_of(const std::vector<Output>& inputs, const std::vector<Tensor>& values) {
  Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds.push_back({inputs[i], values[i]});
  return feeds;
}

void expect_fed_gradients_match(Session& session, Output loss, const std::vector<Output>& inputs,
                                std::vector<Tensor>& values, const std::vector<Output>& grads) {
  const auto loss_now = [&] {
    return static_cast<double>(session.run(feeds_of(inputs, values), {loss})[0].data<float>()[0]);
  };
  const std::vector<Tensor> analytic = session.run(feeds_of(inputs, values), grads);
  const double eps = 1e-2;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("d/d(input " + std::to_string(i) + ")");
    ASSERT_EQ(analytic[i].shape(), values[i].shape());
    float* v = values[i].data<float>();
    for (int64_t e = 0; e < values[i].numel(); ++e) {
      const float saved = v[e];
      v[e] = saved + static_cast<float>(eps);
      const double plus = loss_now();
      v[e] = saved - static_cast<float>(eps);
      const double minus = loss_now();
      v[e] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      ASSERT_NEAR(analytic[i].data<float>()[e], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << "at element " << e;
    }
  }
}

}  // namespace sf::testing
