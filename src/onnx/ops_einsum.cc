// Einsum of one or two operands, as attention and bilinear layers write it ("bij,bjk->bik",
// "bhqd,bhkd->bhqk", "ij->ji", "ij->i", "i,i"): letters only in one operand and not in the
// output are summed first; the rest become one BatchMatMul [batch, M, K] x [batch, K, N] between
// transposes and reshapes. Ellipses and repeated letters (diagonals) are refused by name.
#include <algorithm>
#include <cctype>
#include <functional>

#include "onnx/context.h"
#include "ops/op_names.h"

namespace sf::onnx_import {

namespace {

struct Operand {
  std::string letters;
  Output value;
  Shape shape;
};

bool has(const std::string& s, char letter) { return s.find(letter) != std::string::npos; }

// The letters of `from` that `keep` selects, in `from`'s order.
std::string select(const std::string& from, const std::function<bool(char)>& keep) {
  std::string out;
  for (char l : from)
    if (keep(l)) out += l;
  return out;
}

// x transposed so that its letters read `order`.
Output arrange(Context& c, Operand& x, const std::string& order, const std::string& what) {
  std::vector<int64_t> perm;
  for (char l : order) perm.push_back(static_cast<int64_t>(x.letters.find(l)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x.value;
  return c.add(op_names::kTranspose, {x.value}, {{"perm", perm}}, what);
}

// Sums out the letters of x that neither the other operand nor the output has.
void sum_private(Context& c, Operand& x, const std::string& other, const std::string& out,
                 const std::string& what) {
  std::vector<int64_t> axes;
  std::string kept;
  Shape shape;
  for (size_t i = 0; i < x.letters.size(); ++i) {
    if (!has(other, x.letters[i]) && !has(out, x.letters[i])) {
      axes.push_back(static_cast<int64_t>(i));
    } else {
      kept += x.letters[i];
      shape.push_back(x.shape[i]);
    }
  }
  if (axes.empty()) return;
  x.value = c.add(op_names::kReduceSum, {x.value}, {{"axes", axes}, {"keep_dims", false}}, what);
  x.letters = kept;
  x.shape = shape;
}

int64_t product(const Operand& x, const std::string& letters) {
  int64_t n = 1;
  for (char l : letters) n *= x.shape[x.letters.find(l)];
  return n;
}

void einsum(Context& c) {
  std::string equation;
  for (char ch : c.attr_string("equation", ""))
    if (ch != ' ') equation += ch;
  if (equation.find("...") != std::string::npos)
    c.unsupported("ellipses in equation '{}' are not supported", equation);
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(terms.size()) != c.num_inputs())
    c.fail("equation '{}' names {} operands but the node has {} inputs", equation, terms.size(),
           c.num_inputs());
  if (terms.size() > 2)
    c.unsupported("only one or two operands are supported, got {}", terms.size());
  std::vector<Operand> xs;
  for (size_t i = 0; i < terms.size(); ++i) {
    Value& v = c.in(static_cast<int>(i));
    if (v.dtype != DType::f32) c.unsupported("only float inputs are supported");
    if (terms[i].size() != v.shape.size())
      c.fail("operand {} '{}' has {} letters but input {} has shape {}", i, terms[i],
             terms[i].size(), i, shape_str(v.shape));
    for (char l : terms[i]) {
      if (!std::isalpha(static_cast<unsigned char>(l)))
        c.fail("equation '{}': '{}' is not a letter", equation, l);
      if (std::count(terms[i].begin(), terms[i].end(), l) > 1)
        c.unsupported("repeated letter '{}' in '{}' (a diagonal) is not supported", l, terms[i]);
    }
    xs.push_back(Operand{terms[i], c.plain(v), v.shape});
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = equation.substr(arrow + 2);
  } else {  // implicit: the letters that appear once, alphabetically
    for (char l = 'A'; l <= 'z'; ++l)
      if (std::count(lhs.begin(), lhs.end(), l) == 1) out += l;
  }
  for (char l : out)
    if (!has(lhs, l)) c.fail("equation '{}': output letter '{}' is in no operand", equation, l);
  if (xs.size() == 2)
    for (char l : xs[0].letters)
      if (has(xs[1].letters, l) &&
          xs[0].shape[xs[0].letters.find(l)] != xs[1].shape[xs[1].letters.find(l)])
        c.fail("letter '{}' has size {} in input 0 {} but {} in input 1 {}", l,
               xs[0].shape[xs[0].letters.find(l)], shape_str(xs[0].shape),
               xs[1].shape[xs[1].letters.find(l)], shape_str(xs[1].shape));

  if (xs.size() == 1) {
    sum_private(c, xs[0], "", out, "sum");
    return c.set_out(0, c.add(op_names::kIdentity, {arrange(c, xs[0], out, "transpose")}),
                     Layout::kPlain);
  }
  Operand& a = xs[0];
  Operand& b = xs[1];
  sum_private(c, a, b.letters, out, "sum_a");
  sum_private(c, b, a.letters, out, "sum_b");
  const std::string batch =
      select(out, [&](char l) { return has(a.letters, l) && has(b.letters, l); });
  const std::string contracted =
      select(a.letters, [&](char l) { return has(b.letters, l) && !has(out, l); });
  const std::string a_free = select(a.letters, [&](char l) { return !has(b.letters, l); });
  const std::string b_free = select(b.letters, [&](char l) { return !has(a.letters, l); });
  const int64_t batch_size = product(a, batch), m = product(a, a_free), k = product(a, contracted),
                n = product(b, b_free);
  Output pa = c.add(op_names::kReshape, {arrange(c, a, batch + a_free + contracted, "arrange_a")},
                    {{"shape", Shape{batch_size, m, k}}}, "a");
  Output pb = c.add(op_names::kReshape, {arrange(c, b, batch + contracted + b_free, "arrange_b")},
                    {{"shape", Shape{batch_size, k, n}}}, "b");
  Output product_mn = c.add(op_names::kBatchMatMul, {pa, pb}, {}, "matmul");
  Operand result{batch + a_free + b_free, Output{}, {}};
  for (char l : batch) result.shape.push_back(a.shape[a.letters.find(l)]);
  for (char l : a_free) result.shape.push_back(a.shape[a.letters.find(l)]);
  for (char l : b_free) result.shape.push_back(b.shape[b.letters.find(l)]);
  result.value = c.add(op_names::kReshape, {product_mn}, {{"shape", result.shape}}, "unflatten");
  c.set_out(0, c.add(op_names::kIdentity, {arrange(c, result, out, "transpose")}), Layout::kPlain);
}

}  // namespace

void add_einsum_converter(ConverterMap& m) { m["Einsum"] = einsum; }

}  // namespace sf::onnx_import
