// Finite-difference checks of gradients with respect to a graph's fed inputs, for graphs built
// elsewhere (an imported model, say) rather than by a testing::BuildFn.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"
#include "runtime/session.h"

namespace sf::testing {

// The feeds that give each of `inputs` its tensor in `values`.
Feeds feeds_of(const std::vector<Output>& inputs, const std::vector<Tensor>& values);

// `grads` (the gradients of the scalar `loss` with respect to `inputs`, one each) match central
// differences of the loss that `session` computes, each input at its tensor in `values`; each
// element is nudged in place and put back.
void expect_fed_gradients_match(Session& session, Output loss, const std::vector<Output>& inputs,
                                std::vector<Tensor>& values, const std::vector<Output>& grads);

}  // namespace sf::testing
